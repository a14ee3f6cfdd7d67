#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/).

store_wire: two control bytes (piece size, limits; see fuzz_store_wire.cpp)
and a stream of frames laid out as docs/store-protocol.md describes.
transport_frame: world size, expected rank, a Hello and frames
(transport/frame.hpp). device_steps: world, buffer counts, codec and a step
table (kernels/step_table.cuh). idx: the images file's length and two IDX files
(mlp/dataset.hpp). checkpoint: the control byte and a checkpoint file
(kizuna/checkpoint.hpp). Run it again after a format change:
python3 tests/fuzz/make_seeds.py
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")
OUT = os.path.join(CORPUS, "store_wire")

OPS = dict(hello=1, auth=2, auth_ok=3, set=16, get=17, add=18, compare_set=19, wait=20,
           check=21, delete=22, num_keys=23, multi_get=24, multi_set=25, append=26,
           join=27, list_keys=28, ping=29)


def blob(b):
    if isinstance(b, str):
        b = b.encode()
    return struct.pack("<I", len(b)) + b


def frame(op, body=b"", status=0, rid=1):
    return b"KZST" + struct.pack("<BBBBII", 1, OPS[op], status, 0, rid, len(body)) + body


def keys(*ks):
    return struct.pack("<I", len(ks)) + b"".join(blob(k) for k in ks)


SEEDS = {
    "set": frame("set", blob("rank/0") + blob("10.0.0.1:29500")),
    "get": frame("get", blob("rank/1") + struct.pack("<I", 5000)),
    "add": frame("add", blob("counter") + struct.pack("<q", -3)),
    "compare_set": frame("compare_set", blob("k") + blob("") + blob("new")),
    "wait": frame("wait", struct.pack("<I", 100) + keys("a", "b")),
    "check": frame("check", keys("a")),
    "delete": frame("delete", blob("gone")),
    "num_keys": frame("num_keys"),
    "multi_get": frame("multi_get", struct.pack("<I", 0) + keys("x", "y", "z")),
    "multi_set": frame("multi_set", struct.pack("<I", 2) + blob("x") + blob("1") + blob("y") + blob("")),
    "append": frame("append", blob("log") + blob("line\n")),
    "join": frame("join", struct.pack("<II", 64, 60000)),
    "list_keys": frame("list_keys", blob("rank/")),
    "ping": frame("ping"),
    "hello_open": frame("hello", b"\x00", rid=0),
    "hello_auth": frame("hello", b"\x01" + bytes(range(32)), rid=0),
    "auth": frame("auth", b"\x01" + bytes(32) + bytes(range(32)), rid=0),
    "auth_none": frame("auth", b"\x00", rid=0),
    "auth_ok": frame("auth_ok", bytes(32), rid=0),
    "reply_get": frame("get", blob("value"), rid=7),
    "reply_timeout": frame("get", blob("") + keys("missing"), status=1, rid=7),
    "reply_error": frame("add", blob("not an integer"), status=2, rid=7),
    "reply_multi_get": frame("multi_get", keys("a", "bb"), rid=3),
    "reply_list": frame("list_keys", b"\x00" + keys("a", "b"), rid=3),
    "reply_check": frame("check", b"\x01", rid=3),
    "reply_add": frame("add", struct.pack("<q", 42), rid=3),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    stream = b"".join(SEEDS[k] for k in ("set", "get", "add", "multi_get", "ping"))
    for name, data in SEEDS.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(b"\x00\x00" + data)
    with open(os.path.join(OUT, "stream_bytewise"), "wb") as f:
        f.write(b"\x01\x00" + stream)
    with open(os.path.join(OUT, "stream_pieces"), "wb") as f:
        f.write(b"\x07\x00" + stream)
    with open(os.path.join(OUT, "handshake_limits"), "wb") as f:
        f.write(b"\x00\x01" + SEEDS["auth"] + SEEDS["get"])



def write(target, name, data):
    os.makedirs(os.path.join(CORPUS, target), exist_ok=True)
    with open(os.path.join(CORPUS, target, name), "wb") as f:
        f.write(data)


def hello(comm=0x6b697a756e61, rank=1, world=4, incarnation=0x1234, magic=0x53485a4b, version=1):
    return struct.pack("<IHHQiiQ", magic, version, 0, comm, rank, world, incarnation)


def frame_header(kind, seq, index, nbytes):
    return struct.pack("<IB3xQIIQ", 0x52465a4b, kind, seq, index, 0, nbytes)


def abort_body(origin, lost, code, text):
    return struct.pack("<iiB", origin, lost, code) + text


def transport_seeds():
    ok = hello()
    write("transport_frame", "hello_ok", bytes([3, 1]) + ok)
    write("transport_frame", "hello_stale", bytes([3, 1]) + hello(incarnation=7))
    write("transport_frame", "hello_other_comm", bytes([3, 1]) + hello(comm=1))
    write("transport_frame", "hello_version", bytes([3, 1]) + hello(version=2))
    write("transport_frame", "hello_outside", bytes([3, 9]) + hello(rank=9))
    data = frame_header(1, 17, 0, 8) + bytes(range(8)) + frame_header(1, 17, 1, 0)
    write("transport_frame", "data_frames", bytes([3, 1]) + ok + data)
    text = b"timed out after 30000 ms waiting for rank 3"
    write("transport_frame", "abort", bytes([3, 1]) + ok + frame_header(1, 5, 0, 4) + b"abcd" +
          frame_header(2, 0, 0, 9 + len(text)) + abort_body(2, 3, 1, text))
    write("transport_frame", "abort_truncated", bytes([3, 1]) + ok + frame_header(2, 0, 0, 5) + b"\x01\x00")


STEP = struct.Struct("<BBBBiiIQQQ")  # kernels::DeviceStep, 40 bytes
SEND, RECV, RECV_REDUCE, RECV_REDUCE_SEND, RECV_COPY_SEND, COPY, LOCAL_REDUCE = range(7)
INPUT, OUTPUT, SCRATCH = range(3)


def step(op, src, dst, recv_peer, send_peer, src_offset, dst_offset, count):
    return STEP.pack(op, src, dst, 0, recv_peer, send_peer, 0, src_offset, dst_offset, count)


def device_steps_seeds():
    # Rank 1 of a 4-rank ring all-reduce of 8 elements: reduce-scatter, then all-gather.
    ring = b"".join([
        step(SEND, INPUT, OUTPUT, -1, 2, 2, 0, 2),
        step(RECV_REDUCE, INPUT, OUTPUT, 0, -1, 0, 0, 2),
        step(RECV_REDUCE_SEND, INPUT, OUTPUT, 0, 2, 0, 0, 2),
        step(RECV_REDUCE_SEND, INPUT, OUTPUT, 0, 2, 6, 6, 2),
        step(RECV_COPY_SEND, INPUT, OUTPUT, 0, 2, 0, 4, 2),
        step(RECV, INPUT, OUTPUT, 0, -1, 0, 2, 2),
    ])
    write("device_steps", "ring", bytes([4, 8, 8, 0, 0]) + ring)
    local = step(COPY, INPUT, SCRATCH, -1, -1, 0, 0, 4) + step(LOCAL_REDUCE, SCRATCH, OUTPUT, -1, -1, 0, 4, 4)
    write("device_steps", "local", bytes([1, 4, 8, 4, 1]) + local)
    write("device_steps", "bad_peer", bytes([2, 4, 4, 0, 2]) + step(SEND, INPUT, OUTPUT, -1, 5, 0, 0, 4))
    write("device_steps", "bad_range", bytes([2, 4, 4, 0, 3]) + step(RECV, INPUT, OUTPUT, 1, -1, 0, 2, 4))
    write("device_steps", "empty", bytes([2, 0, 0, 0, 0]))


def idx(dims, elements):
    return bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + elements


def idx_seeds():
    image = bytes((i * 7) % 256 for i in range(28 * 28))
    one = idx([1, 28, 28], image)
    labels1 = idx([1], b"\x07")
    def pair(images, labels):
        return struct.pack("<H", len(images)) + images + labels
    write("idx", "one_image", pair(one, labels1))
    write("idx", "two_images", pair(idx([2, 28, 28], image + image[::-1]), idx([2], b"\x00\x09")))
    write("idx", "bad_label", pair(one, idx([1], b"\x0a")))
    write("idx", "count_mismatch", pair(one, idx([2], b"\x01\x02")))
    write("idx", "small_4d", pair(idx([1, 2, 2, 2], bytes(8)), idx([3], b"\x01\x02\x03")))


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def checkpoint(entries):
    payload = b""
    for name, dtype, count, data in entries:
        payload += struct.pack("<I", len(name)) + name + struct.pack("<BQ", dtype, count) + data
    body = b"KZCKPT\r\n" + struct.pack("<IIQ", 1, len(entries), len(payload)) + payload
    return body + struct.pack("<I", crc32c(body))


def checkpoint_seeds():
    assert crc32c(b"123456789") == 0xE3069283
    trainer = checkpoint([
        (b"options", 1, 11, b"layers=8,4\n"),
        (b"model.params", 8, 3, struct.pack("<3f", 0.5, -1.0, 2.0)),
        (b"optimizer.steps", 4, 1, struct.pack("<q", 12)),
        (b"rng", 5, 2, struct.pack("<QQ", 1, 2)),
        (b"loss_scale", 8, 1, struct.pack("<f", 65536.0)),
        (b"half", 6, 2, b"\x00\x3c\x00\xc0"),
    ])
    write("checkpoint", "trainer", b"\x00" + trainer)
    write("checkpoint", "trainer_fix_crc", b"\x01" + trainer)
    write("checkpoint", "empty", b"\x00" + checkpoint([]))
    write("checkpoint", "zero_count", b"\x01" + checkpoint([(b"nothing", 9, 0, b"")]))
    write("checkpoint", "bad_crc", b"\x00" + trainer[:-1] + bytes([trainer[-1] ^ 1]))


if __name__ == "__main__":
    main()
    transport_seeds()
    device_steps_seeds()
    idx_seeds()
    checkpoint_seeds()
