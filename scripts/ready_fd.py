"""innoprof's `--ready-fd` handshake, for the scripts that start innoprof.

innoprof writes one JSON line to the descriptor once every probe is
attached (`{"event":"attached","command":"record","innoprof_pid":…,
"targets":[…]}`) and closes it; end of file without a line means it gave
up before attaching. The stderr lines are for people and may change, so
scripts wait on this instead (README, `--ready-fd`).
"""

import json
import os
import subprocess


class ReadyPipe:
    """A pipe whose write end innoprof gets as `--ready-fd`; read without blocking."""

    def __init__(self):
        self.r, self.w = os.pipe()
        os.set_blocking(self.r, False)
        self.buf = b""
        self.ready = None

    def popen(self, argv, **kwargs):
        """Starts `argv --ready-fd W` with the write end passed; the parent's copy is closed,
        so end of file comes when innoprof closes (or exits without) its own."""
        try:
            return subprocess.Popen(argv + ["--ready-fd", str(self.w)], pass_fds=(self.w,), **kwargs)
        finally:
            os.close(self.w)

    def poll(self):
        """The ready line, parsed, once it came; None until then. Raises EOFError when
        innoprof closed the pipe without one (it did not attach)."""
        while self.ready is None:
            if b"\n" in self.buf:
                line = self.buf.split(b"\n", 1)[0]
                ready = json.loads(line)
                if ready.get("event") != "attached":
                    raise ValueError(f"unexpected --ready-fd line: {line!r}")
                self.ready = ready
                break
            try:
                chunk = os.read(self.r, 4096)
            except BlockingIOError:
                return None
            if not chunk:
                raise EOFError("innoprof closed --ready-fd without a ready line")
            self.buf += chunk
        return self.ready

    def close(self):
        if self.r is not None:
            os.close(self.r)
            self.r = None
