"""The sections of a model client (models_*.py): each runs on its own, and
one that fails prints `<name>=error <type>: <message>` (its traceback on
stderr) while the script goes on, so one run reports every section."""
import sys
import traceback


def report(name, fn, *args):
    """Runs `fn(*args)` and prints `<name>=ok`, or `<name>=error …`."""
    try:
        fn(*args)
        print(f"{name}=ok", flush=True)
    except Exception as e:  # noqa: BLE001 - every failure is reported, not raised
        print(f"{name}=error {type(e).__name__}: {' '.join(str(e).split())[:300]}", flush=True)
        traceback.print_exc(file=sys.stderr)
