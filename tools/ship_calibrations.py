"""Write the shipped calibration table from a cache directory.

    export SECUREVFL_CACHE_DIR=/tmp/cal SECUREVFL_SHIPPED_CALIBRATIONS=off
    securevfl bench --suite compare --methods pbm-vfl --seeds 0 --out /tmp/o
    securevfl bench --suite default --methods pbm-vfl --out /tmp/o2
    python tools/ship_calibrations.py /tmp/cal

collects every entry the runs computed (``KIND/KEY.json``) into
``securevfl/privacy/calibrations.json`` (``securevfl.privacy.calibration_cache.SHIPPED``). Rerun it
after a change to the accountant's code: the keys name the code version, so old entries only miss
(``SECUREVFL_SHIPPED_CALIBRATIONS=off``: the runs must compute every entry, not reuse the table).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from securevfl.privacy.calibration_cache import MAX_BYTES, SHIPPED


def collect(root: Path) -> dict[str, dict[str, dict]]:
    """kind -> key -> entry, for every well-formed entry under ``root``."""
    out: dict[str, dict[str, dict]] = {}
    for path in sorted(root.glob("*/*.json")):
        raw = path.read_bytes()
        if len(raw) > MAX_BYTES:
            continue
        doc = json.loads(raw)
        if isinstance(doc, dict) and doc.get("key") == path.stem:
            out.setdefault(path.parent.name, {})[path.stem] = doc
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python tools/ship_calibrations.py CACHE_DIR", file=sys.stderr)
        return 2
    entries = collect(Path(argv[0]))
    doc = {"format": 1, "entries": entries}
    SHIPPED.write_text(json.dumps(doc, sort_keys=True, indent=1) + "\n", encoding="utf-8")
    print(f"{SHIPPED}: {sum(map(len, entries.values()))} entries ({', '.join(sorted(entries))})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
