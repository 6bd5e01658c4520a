"""An independent safetensors reader (numpy only): checks that tensor NAME in
FILE holds exactly the float32 values in EXPECTED (raw little-endian) and
has SHAPE. Exit 0 when equal; prints the first mismatch otherwise."""
import json
import struct
import sys

import numpy as np


def main(path, name, expected_path, shape):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    entry = header[name]
    assert entry["dtype"] == "F32", entry
    assert entry["shape"] == shape, (entry["shape"], shape)
    begin, end = entry["data_offsets"]
    got = np.frombuffer(data[begin:end], dtype="<f4").reshape(shape)
    want = np.fromfile(expected_path, dtype="<f4").reshape(shape)
    if not np.array_equal(got, want):
        i = np.argwhere(got != want)[0]
        print(f"{name}{list(i)}: file {got[tuple(i)]!r} != expected {want[tuple(i)]!r}")
        return 1
    print(f"{name}: {got.size} values equal, metadata {header.get('__metadata__')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], [int(x) for x in sys.argv[4:]]))
