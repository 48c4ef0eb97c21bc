#!/usr/bin/env python3
"""Prints the closing line "N passed, N failed[, N skipped]" of .ci/test.

usage: summary.py BROKEN_BUILDS TESTLOG.json...
A build that failed counts as one failure; so does a test log that cannot be read.
"""
import json
import sys


def main() -> int:
    passed = skipped = 0
    failed = int(sys.argv[1])
    for path in sys.argv[2:]:
        try:
            with open(path, encoding='utf-8') as f:
                lines = f.read().splitlines()
        except OSError:
            failed += 1
            continue
        for line in lines:
            if not line.strip():
                continue
            result = json.loads(line).get('result')
            if result in ('OK', 'EXPECTEDFAIL'):
                passed += 1
            elif result == 'SKIP':
                skipped += 1
            else:
                failed += 1
    tail = f', {skipped} skipped' if skipped else ''
    print(f'{passed} passed, {failed} failed{tail}')
    return 0 if failed == 0 else 1


if __name__ == '__main__':
    sys.exit(main())
