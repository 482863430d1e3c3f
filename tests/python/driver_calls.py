"""What the cuda-bindings clients of the tests share: one way to check a
driver call."""
import sys


def check(result):
    """The call's values, or exit printing `fatal=<CUresult>`."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        print(f"fatal={int(err)}", flush=True)
        sys.exit(2)
    return rest[0] if len(rest) == 1 else rest
