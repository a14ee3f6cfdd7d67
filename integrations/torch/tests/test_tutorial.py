"""The DDP tutorial program (examples/ddp_tutorial.py: random data set, a
Linear model, DistributedSampler with set_epoch, mp.spawn,
init_process_group) runs to the end with backend="kizuna"."""

import re
import subprocess
import sys
import zipfile

import harness


def test_ddp_tutorial_runs(tmp_path):
    epochs, world = 3, 2
    proc = subprocess.run(
        [sys.executable, str(harness.SOURCE / "examples" / "ddp_tutorial.py"), str(epochs), "1",
         "--world_size", str(world)],
        cwd=tmp_path, env=harness.worker_env({"MASTER_PORT": str(harness.free_port())}),
        capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for rank in range(world):
        for epoch in range(epochs):
            # 2048 samples split over 2 ranks in batches of 32: 32 steps each.
            assert re.search(rf"\[rank{rank}\] Epoch {epoch} \| Batchsize: 32 \| Steps: 32", proc.stdout), \
                proc.stdout
    assert f"Epoch {epochs - 1} | Training checkpoint saved at checkpoint.pt" in proc.stdout
    # The checkpoint rank 0 saved (torch.save's zip format, read without
    # importing torch here): the Linear(20, 1)'s weight (20 float32) and bias (1).
    with zipfile.ZipFile(tmp_path / "checkpoint.pt") as z:
        sizes = sorted(i.file_size for i in z.infolist() if "/data/" in i.filename)
    assert sizes == [4, 80], sizes
