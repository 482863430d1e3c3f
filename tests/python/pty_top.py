"""Drives a full-screen program in a pseudo-terminal as a person would.

Usage: pty_top.py --expect TEXT [--size ROWSxCOLS] [--resize ROWSxCOLS]
                  [--quit-key KEY] [--transcript FILE] -- COMMAND...

Starts COMMAND on a pseudo-terminal of the given size, waits until its
screen shows TEXT, resizes the terminal (the kernel sends SIGWINCH), waits
until the screen shows TEXT again, then types the quit key and waits for
the exit. Prints key=value lines for the test to assert on:

  rendered=1                 TEXT appeared on the first screen
  redrawn_after_resize=1     TEXT appeared again after the resize
  alive_after_resize=1       the program was still running after it
  exit_code=N                how it ended (`timeout` if it did not, `signal:N`)
  quit_ms=N                  time from the key to the exit
  entered_alternate_screen=1 / left_alternate_screen=1
  cursor_shown_at_exit=1     the cursor was made visible again at the end

Every wait has a deadline; a program that outlives them is killed.
"""

import argparse
import fcntl
import os
import pty
import re
import select
import signal
import struct
import sys
import termios
import time

ESCAPE = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]")
ENTER_ALTERNATE = b"\x1b[?1049h"
LEAVE_ALTERNATE = b"\x1b[?1049l"
SHOW_CURSOR = b"\x1b[?25h"
KEYS = {"q": b"q", "esc": b"\x1b", "ctrl-c": b"\x03"}


def size(text):
    rows, cols = text.lower().split("x")
    return int(rows), int(cols)


def set_size(fd, rows, cols):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


class Program:
    def __init__(self, command, rows, cols):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            # The child's terminal has its size before the program asks.
            set_size(0, rows, cols)
            os.environ["TERM"] = "xterm-256color"
            try:
                os.execvp(command[0], command)
            finally:
                os._exit(127)
        self.output = b""
        self.status = None

    def read(self, timeout):
        """Reads what is there within `timeout`; False at end of output."""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: the program closed its terminal
            return False
        self.output += data
        return bool(data)

    def screen_since(self, offset):
        return ESCAPE.sub(b"", self.output[offset:]).decode("utf-8", "replace")

    def wait_for_text(self, text, offset, deadline):
        while time.monotonic() < deadline:
            if text in self.screen_since(offset):
                return True
            if not self.read(0.05) or self.exited():
                return text in self.screen_since(offset)
        return False

    def exited(self):
        if self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid == self.pid:
                self.status = status
        return self.status is not None

    def wait_exit(self, deadline):
        while time.monotonic() < deadline:
            if self.exited():
                # Whatever it wrote last.
                while self.read(0.05):
                    pass
                return True
            self.read(0.05)
        return False

    def exit_code(self):
        if self.status is None:
            return "timeout"
        if os.WIFSIGNALED(self.status):
            return "signal:%d" % os.WTERMSIG(self.status)
        return str(os.WEXITSTATUS(self.status))

    def kill(self):
        if not self.exited():
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--expect", required=True)
    parser.add_argument("--size", default="30x160")
    parser.add_argument("--resize", default="24x100")
    parser.add_argument("--quit-key", default="q", choices=sorted(KEYS))
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--transcript")
    parser.add_argument("command", nargs="+")
    args = parser.parse_args()

    rows, cols = size(args.size)
    program = Program(args.command, rows, cols)
    try:
        rendered = program.wait_for_text(args.expect, 0, time.monotonic() + args.timeout)
        print("rendered=%d" % rendered)
        if rendered:
            offset = len(program.output)
            set_size(program.fd, *size(args.resize))
            redrawn = program.wait_for_text(args.expect, offset, time.monotonic() + args.timeout)
            print("redrawn_after_resize=%d" % redrawn)
            print("alive_after_resize=%d" % (not program.exited()))
        offset = len(program.output)
        os.write(program.fd, KEYS[args.quit_key])
        asked = time.monotonic()
        if program.wait_exit(asked + args.timeout):
            print("quit_ms=%d" % ((time.monotonic() - asked) * 1000))
        print("exit_code=%s" % program.exit_code())
        print("entered_alternate_screen=%d" % (ENTER_ALTERNATE in program.output))
        print("left_alternate_screen=%d" % (LEAVE_ALTERNATE in program.output[offset:]))
        print("cursor_shown_at_exit=%d" % (SHOW_CURSOR in program.output[offset:]))
    finally:
        program.kill()
        if args.transcript:
            with open(args.transcript, "wb") as f:
                f.write(program.output)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
