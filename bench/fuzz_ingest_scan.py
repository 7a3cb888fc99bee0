"""Mutation fuzzing of bulk ingest's compiled scanner, built with AddressSanitizer and UBSan.

    .venv/bin/python bench/fuzz_ingest_scan.py [--seconds 300] [--seed 1] [--plain]

The scanner (`ingest/_scan.c`) reads untrusted bytes in C. This builds a
second copy of it with `-fsanitize=address,undefined` into a temporary
directory, re-runs itself with the sanitizer runtimes preloaded, and feeds it
blocks of damaged lines: realistic turns, the hostile corpus and the scanner's
edge lines, each with byte flips, cuts, insertions of JSON's special bytes,
bad UTF-8 and spliced copies of itself. Every block is encoded by the
per-record path and by the compiled path under the default limits and under
tight ones; their outcomes (stored bytes, ids, partitions, quarantine
reasons) must be identical. A memory error stops the run with the
sanitizer's report; a differing outcome is written to a file and the run
exits 1. `--plain` fuzzes the build in the virtual environment instead
(no sanitizers, faster). Prints the blocks tried and the rate.

The clock is frozen for the run: a line without `ts` is stamped with the
ingest time, which would otherwise differ between the two encodings.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import subprocess
import sys
import sysconfig
import tempfile
import time
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

SPECIAL = b'"\\{}[]:,0123456789.eE+-\x00\xff\xc3\xa9 \tnultrfase\x80\xbf\xed\xa0'
DEFAULT_TS = "2026-03-04T05:06:07.089Z"


def build_sanitized(out_dir: Path) -> Path:
    """Compile `ingest/_scan.c` with the sanitizers; the path of the module file."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    target = out_dir / f"_scan{suffix}"
    include = sysconfig.get_paths()["include"]
    subprocess.run(
        [
            "cc",
            "-shared",
            "-fPIC",
            "-O1",
            "-g",
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=undefined",
            "-fno-omit-frame-pointer",
            f"-I{include}",
            str(ROOT / "ingest" / "_scan.c"),
            "-o",
            str(target),
        ],
        check=True,
    )
    return target


def runtime_libraries() -> str:
    found = []
    for name in ("libasan.so", "libubsan.so"):
        path = subprocess.run(["cc", f"-print-file-name={name}"], capture_output=True, text=True, check=True)
        found.append(path.stdout.strip())
    return ":".join(found)


def seed_lines() -> list[bytes]:
    import orjson
    from hostile_corpus import corpus, file_bytes
    from test_ingest_columnar import NATIVE_EDGES, _good

    from tiermem.app import samples

    lines = [orjson.dumps(_good(k)) for k in range(50)] + list(NATIVE_EDGES)
    lines += [orjson.dumps(r) for r in samples.generate(days=1, per_day=200, end=date(2026, 3, 4), seed=3)]
    lines += [line.rstrip(b"\r") for line in file_bytes(corpus())[3:].split(b"\n") if line]
    return lines


def mutate(line: bytes, rnd: random.Random) -> bytes:
    b = bytearray(line)
    for _ in range(rnd.randint(1, 4)):
        if not b:
            b += bytes([rnd.choice(SPECIAL)])
            continue
        i = rnd.randrange(len(b))
        op = rnd.randrange(6)
        if op == 0:
            b[i] = rnd.choice(SPECIAL)
        elif op == 1:
            del b[i : i + rnd.randint(1, 8)]
        elif op == 2:
            b[i:i] = bytes(rnd.choice(SPECIAL) for _ in range(rnd.randint(1, 4)))
        elif op == 3:
            del b[i:]
        elif op == 4:
            b[i:i] = b[rnd.randrange(len(b)) :][: rnd.randint(1, 40)]
        else:
            b[i] = rnd.randrange(256)
    return bytes(b)


def fuzz(module_path: Path | None, seconds: float, seed: int) -> int:
    from test_ingest_columnar import LIMITS, outcome
    from tiermem.ingest import compiled
    from tiermem.ingest.pipeline import encode_block

    import tiermem.events as events
    from tiermem.settings import LimitSettings

    if module_path is not None:
        spec = importlib.util.spec_from_file_location("tiermem.ingest._scan", module_path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        compiled._scan = module
    if not compiled.available():
        print("the compiled scanner is not built: nothing to fuzz", file=sys.stderr)
        return 2
    frozen = datetime(2026, 3, 4, 5, 6, 7, 89000, tzinfo=UTC)
    events.utcnow = lambda: frozen  # type: ignore[assignment]
    tight = LimitSettings(max_field_chars=60, max_depth=3, min_year=2026, max_year=2026)
    rnd = random.Random(seed)
    seeds = seed_lines()
    tried = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        picked = [rnd.choice(seeds) for _ in range(rnd.randint(1, 12))]
        block = b"\n".join(mutate(s, rnd) if rnd.random() < 0.7 else s for s in picked)
        for limits in (LIMITS, tight):
            expected: Any = outcome(encode_block(block, DEFAULT_TS, limits, columnar=False))
            got: Any = outcome(encode_block(block, DEFAULT_TS, limits, compiled=True))
            if got != expected:
                out = Path(tempfile.gettempdir()) / f"fuzz_ingest_scan_{seed}_{tried}.bin"
                out.write_bytes(block)
                print(f"outcomes differ (limits {limits}); block written to {out}", file=sys.stderr)
                return 1
        tried += 1
    elapsed = time.monotonic() - started
    print(
        f"{tried} blocks ({2 * tried} encodings each way) in {elapsed:.0f} s: {tried / elapsed:.0f} blocks/s, no difference"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--plain", action="store_true", help="fuzz the installed build, no sanitizers")
    parser.add_argument(
        "--module", type=Path, help=argparse.SUPPRESS
    )  # set by the re-run under the sanitizers
    args = parser.parse_args()
    if args.plain or args.module is not None:
        return fuzz(args.module, args.seconds, args.seed)
    with tempfile.TemporaryDirectory(prefix="fuzz-scan-") as tmp:
        module = build_sanitized(Path(tmp))
        env = {
            **os.environ,
            "LD_PRELOAD": runtime_libraries(),
            "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
        }
        argv = [sys.executable, __file__, "--seconds", str(args.seconds), "--seed", str(args.seed)]
        print(f"built {module.name} with AddressSanitizer and UBSan; fuzzing for {args.seconds:g} s")
        return subprocess.run([*argv, "--module", str(module)], env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
