"""``airplan shell``: an interactive prompt for statements and catalog queries.

Statements may span lines and end with ``;``. Dot commands: ``.help``, ``.tables``,
``.format text|json|csv``, ``.quit``. History is kept in ``~/.airplan_history`` when readline is
available. Errors are printed and the shell goes on, a query stopped at a limit included.
Catalog queries are fenced and limited as for ``airplan sql`` (docs/sql.md, Security).
"""

from __future__ import annotations

import os
import sys

from .catalog.sandbox import DEFAULT_TIMEOUT
from .errors import AirPlanError
from .session import connect
from .termination import terminated

HELP = """Statements end with ';' and may span lines:
  EXPLAIN [ANALYZE] [(VERBOSE, FORMAT JSON, ALTERNATIVES 3)] TRAIN digits ON 20 CLIENTS
      [WITH (alpha = 0.5, snr_db = 10)] [USING TOPOLOGY ring, small_world(k = 4)]
      [USING SPARSITY IN (0.1, 1)] [SLA accuracy >= 0.95 * fc] [WITHIN 200 ROUNDS] ...;
  ANALYZE WORKLOAD digits ON 20 CLIENTS WITH (alpha = 0.5);
  SELECT * FROM airplan.plans WHERE chosen;      -- any read-only DuckDB query
Dot commands: .help  .tables  .format text|json|csv  .quit"""


class Shell:
    def __init__(self, catalog: str | None, *, read_only: bool = False, fmt: str = "text",
                 stdin=None, stdout=None, allow_external_access: bool = False,
                 timeout: float | None = DEFAULT_TIMEOUT, memory_limit: int | str | None = None,
                 threads: int | None = None, device: str | None = None):
        self.catalog_path = catalog
        self.device = device
        self.read_only = read_only
        self.limits = {"allow_external_access": allow_external_access, "timeout": timeout,
                       "memory_limit": memory_limit, "threads": threads}
        self.fmt = fmt
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout
        self.interactive = self.stdin.isatty()

    def _print(self, text: str) -> None:
        print(text, file=self.stdout)

    def _history(self):
        try:
            import readline
        except ImportError:
            return None
        path = os.path.expanduser("~/.airplan_history")
        try:
            readline.read_history_file(path)
        except OSError:
            pass
        return lambda: _save_history(readline, path)

    def _read(self, prompt: str) -> str | None:
        if self.interactive:
            try:
                return input(prompt)
            except EOFError:
                return None
        line = self.stdin.readline()
        return None if line == "" else line.rstrip("\n")

    def run(self) -> int:
        from .sql.executor import aborted_note, format_result, iter_script

        save = self._history() if self.interactive else None
        with connect(self.catalog_path, read_only=self.read_only, device=self.device,
                     **self.limits) as session:
            if self.interactive:
                self._print(f"airplan shell on {session.catalog.path} (.help for help)")
            buffer: list[str] = []
            while True:
                line = self._read("airplan> " if not buffer else "    ...> ")
                if line is None:
                    break
                stripped = line.strip()
                if not buffer and stripped.startswith("."):
                    if not self._dot(stripped, session):
                        break
                    continue
                buffer.append(line)
                if not stripped.endswith(";"):
                    continue
                text = "\n".join(buffer)
                buffer = []
                try:
                    for result in iter_script(session, text, fmt=self.fmt):
                        self._print(format_result(result, self.fmt))
                        if aborted_note(result):
                            self._print(aborted_note(result))
                except AirPlanError as exc:
                    self._print(f"error: {exc}")
                except KeyboardInterrupt:
                    self._print("interrupted")
                if terminated():     # SIGTERM: the statement stopped, and so does the shell
                    break
        if save:
            save()
        return 130 if terminated() else 0

    def _dot(self, command: str, session) -> bool:
        word, _, arg = command.partition(" ")
        if word in (".quit", ".exit"):
            return False
        if word == ".help":
            self._print(HELP)
        elif word == ".tables":
            names, rows = session.catalog.execute_user_sql(
                "SELECT table_name FROM information_schema.tables WHERE table_catalog = "
                "'airplan' ORDER BY table_name")
            self._print("\n".join(r[0] for r in rows))
        elif word == ".format" and arg.strip() in ("text", "json", "csv"):
            self.fmt = arg.strip()
        else:
            self._print(f"unknown command {command!r}; .help lists the commands")
        return True


def _save_history(readline, path: str) -> None:
    try:
        readline.write_history_file(path)
    except OSError:
        pass
