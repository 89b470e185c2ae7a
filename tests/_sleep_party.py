"""A party that only waits (tests/test_forked.py): it dies with its launcher or not at all."""

import time

from protocols.processes import die_with_parent

if __name__ == "__main__":
    die_with_parent()
    time.sleep(120)
