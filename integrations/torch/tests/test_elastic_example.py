"""examples/elastic_ddp.py under kizuna-run --elastic: a rank that dies
mid-epoch is survived; the others shrink the group (kizuna_torch.shrink),
redo the step, and use every sample of every epoch once."""

import re
import subprocess
import sys

import harness

EPOCHS, SAMPLES = 2, 4096


def run_example(*args):
    proc = subprocess.run(
        [harness.kizuna_run(), "--nproc-per-node", "4", "--elastic", "2:4", "--",
         sys.executable, "-u", str(harness.SOURCE / "examples" / "elastic_ddp.py"),
         "--epochs", str(EPOCHS), "--samples", str(SAMPLES), *args],
        env=harness.worker_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        timeout=150)
    assert proc.returncode == 0, f"kizuna-run exited {proc.returncode}\n{proc.stdout[-8000:]}"
    return proc.stdout


def test_a_killed_rank_is_survived_and_every_sample_used_once():
    # 4 ranks x 32: 32 steps per epoch; rank 2 dies at the start of step 40,
    # in epoch 2, whose 8 done steps leave 3072 samples to the 3 survivors.
    out = run_example("--kill-rank", "2", "--kill-step", "40")
    assert "rank 2 (local rank 2" in out and "the other 3 go on" in out, out[-8000:]
    assert re.search(r"\[0\] \[elastic_ddp\] lost a rank at step 40 \(.*rank 2.*\); "
                     r"shrank from 4 to 3 ranks in [0-9.]+ s; redoing the step", out), out[-8000:]
    epochs = re.findall(r"\[0\] \[elastic_ddp\] epoch (\d+): (\d+) samples, world (\d+)", out)
    assert epochs == [("1", str(SAMPLES), "4"), ("2", str(SAMPLES), "3")], out[-8000:]
    # 32 steps, then 8 of 4 ranks and 3072 / 96 = 32 of 3.
    assert re.search(r"\[0\] \[elastic_ddp\] done: 72 steps, world 3, final test accuracy 0\.\d+", out), \
        out[-8000:]
    assert "every worker still in the job exited with code 0 (1 lost, 0 replaced along the way)" in out
