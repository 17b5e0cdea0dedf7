#!/usr/bin/env python3
"""Copies the `writ` binary out of a wheel, so the npm package carries the
very binary the wheel was checked with.

    python3 npm/wheel_binary.py WHEEL OUT

OUT's file name is the binary's (`writ`, or `writ.exe` on Windows): the one
under the wheel's `*.data/scripts/`. Used by `.ci/package` and the release
workflow alike.
"""

import os
import sys
import zipfile


def main() -> int:
    if len(sys.argv) != 3:
        print("usage: wheel_binary.py WHEEL OUT", file=sys.stderr)
        return 2
    wheel_path, out = sys.argv[1], sys.argv[2]
    exe = os.path.basename(out)
    with zipfile.ZipFile(wheel_path) as wheel:
        names = [n for n in wheel.namelist() if n.endswith(".data/scripts/" + exe)]
        if len(names) != 1:
            print(f"{wheel_path}: expected one .data/scripts/{exe}, found {names}", file=sys.stderr)
            return 1
        data = wheel.read(names[0])
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "wb") as f:
        f.write(data)
    os.chmod(out, 0o755)
    return 0


if __name__ == "__main__":
    sys.exit(main())
