"""A session from the default preload image at rest (no command for 1 s after a turn): it
gives back the pages it wrote that hold the image's bytes again (crates/runtime rest.rs;
counted by the Rust tests in crates/runtime/tests/it/rest.rs), and what the guest reads
never changes: its variables, a pandas computation, a snapshot taken after the rest and
its forks, and the runs that reuse its pool slot after it closed."""

import time

from wasi_python import Session, run

# A session rests once no command came for 1 s (sched's REST); this waits past it.
PAST_REST_S = 1.6

SETUP = """
import pandas as pd
df = pd.DataFrame({'k': [i % 3 for i in range(1000)], 'v': [i / 3 for i in range(1000)]})
x = 41
names = {f'n{i}': [i, i] for i in range(5000)}
pd.leak = 1
"""
COMPUTE = "print(df.groupby(df.k).v.sum().round(3).tolist(), int(df.v.idxmax()), x, names['n7'])"
COMPUTED = b"[55611.0, 55389.0, 55500.0] 999 41 [7, 7]\n"
# Reference counts of every module's values raised and lowered again: pages of the
# image written back as they were.
TOUCH = "import sys\nfor m in list(sys.modules.values()):\n    for v in list(getattr(m, '__dict__', {}).values()): pass\nm = v = None"
CLEAN = "import pandas as pd\nprint(hasattr(pd, 'leak'), pd.DataFrame({'a': [1, 2]}).a.sum())"


def test_a_rested_session_from_the_default_preload_reads_the_same():
    with Session(deadline_s=60) as s:
        assert s.run(SETUP).ok
        assert s.run(COMPUTE).stdout == COMPUTED
        assert s.run(TOUCH).ok
        time.sleep(PAST_REST_S)
        assert s.run(COMPUTE).stdout == COMPUTED
        time.sleep(PAST_REST_S)
        snap = s.snapshot()
        # Written after the rests: the session's own, and its next snapshot's.
        assert s.run("df.loc[999, 'v'] = -1.0\nx = 42\nnames['n7'][1] = 70").ok
        time.sleep(PAST_REST_S)
        later = s.snapshot()
        changed = b"[55277.0, 55389.0, 55500.0] 998 42 [7, 70]\n"
        assert s.run(COMPUTE).stdout == changed
    with Session(snapshot=snap, deadline_s=60) as f:
        assert f.run(COMPUTE).stdout == COMPUTED
    with Session(snapshot=later, deadline_s=60) as f:
        assert f.run(COMPUTE).stdout == changed
    # Its slot, reset, serves sessions and runs that start from the image.
    for _ in range(3):
        assert run(["-c", CLEAN]).stdout == b"False 3\n"
        with Session(deadline_s=60) as n:
            assert n.run(CLEAN).stdout == b"False 3\n"
