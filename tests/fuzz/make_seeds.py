#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_store_wire (tests/fuzz/corpus/store_wire/).

Each seed is two control bytes (piece size, limits; see fuzz_store_wire.cpp)
and a stream of frames laid out as docs/store-protocol.md describes. Run it
again after a protocol change: python3 tests/fuzz/make_seeds.py
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "store_wire")

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


if __name__ == "__main__":
    main()
