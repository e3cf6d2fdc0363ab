"""`memdoc diagnose SCRIPT`: run the user's script in this process, then report it (`ScriptRun`) — also from
the watchdog when the script ignores --timeout. The report is `memdoc.core.reports.diagnose.ScriptReport`."""

from typing import Optional

import typer

from memdoc.commands.html_page import script_timeline, write_html
from memdoc.commands.options import PlanFlags


class ScriptRun:
    """`memdoc diagnose SCRIPT`: run the script, then report (also from the watchdog when it ignores --timeout)."""

    def __init__(
        self, target: str, *, json_out: bool, snapshot: Optional[str], summary: bool, force: bool, html=None
    ) -> None:
        self.target, self.json_out, self.snapshot, self.summary = target, json_out, snapshot, summary
        self.force, self.html = force, html
        """--force (the snapshot's and the page's files), --html FILE or None."""

    def start(self, args: list[str], *, plan: PlanFlags, steps: int, timeout: float) -> None:
        from memdoc import render
        from memdoc.output.snapshot import check_snapshot
        from memdoc.probe.script import run_script

        if self.snapshot is not None:  # before the script runs: never after a long run
            check_snapshot(self.snapshot, force=self.force)
        if plan.any_given:
            render.note("note: plan flags are ignored for scripts: the plan is detected from what the script runs")
        result = run_script(
            self.target,
            args,
            steps=steps,
            timeout=timeout or None,
            stdout_to_stderr=self.json_out,
            want_snapshot=self.snapshot is not None,
            on_stuck=self.on_stuck,
        )
        self.report(result)
        if result.exit_code:
            raise typer.Exit(result.exit_code)

    def report(self, result) -> None:
        import sys

        from memdoc import render
        from memdoc.core.reports.diagnose import ScriptReport, read_oom, script_bill

        sys.stdout.flush()
        if result.oom:
            read_oom(result.oom, result.traceback, result.steps)
        if result.traceback:
            sys.stderr.write(result.traceback)
            sys.stderr.flush()
        bill, note = script_bill(result.hf) if result.hf else (None, None)
        if note:
            render.note(note)
        written = write_snapshot_files(result, self.snapshot, force=self.force) if self.snapshot is not None else []
        if self.html is not None:
            data = ScriptReport(result, bill, written).to_json() | {"timeline": script_timeline(result)}
            write_html(self.html, data, title=f"memdoc diagnose {result.script}", force=self.force)
            written.append(str(self.html))
        if not self.json_out:
            return render.render_script_report(result, bill, summary=self.summary, written=written)
        render.print_json(ScriptReport(result, bill, written).to_json())

    def on_stuck(self, result) -> None:
        """From the watchdog thread: report, then end the process."""
        import contextlib
        import sys

        from memdoc.probe.script.guard import end_process

        try:
            if result is None:
                print("Error: the script ignored --timeout and memdoc could not build its report", file=sys.stderr)
            else:  # the script still runs, its stdout redirected (--json): the report goes to the real stdout
                with contextlib.redirect_stdout(sys.__stdout__):
                    self.report(result)
        finally:
            end_process(result.exit_code if result is not None else 1)


def write_snapshot_files(result, raw: str, *, force: bool) -> list[str]:
    """Write --snapshot FILE's pickle (a CUDA script only) and HTML timeline, all or none
    (`memdoc.output.snapshot.write_snapshot`), the timeline coloured by line item (`html_page.script_timeline`);
    the page names the pickle only when one is written."""
    import pickle

    from memdoc.output.snapshot import snapshot_paths, write_snapshot
    from memdoc.render.timeline import timeline_html

    timeline = script_timeline(result)
    pickled = pickle.dumps(result.snapshot) if result.snapshot is not None else None
    html_text = timeline_html(
        timeline["points"],
        title=f"memdoc diagnose {result.script}: allocated memory",
        notes=[f"Source: {timeline['source']}.", f"Peak phase: {result.peak_phase}."],
        marks=timeline["marks"],
        pickle_name=snapshot_paths(raw)[0].name if pickled is not None else None,
    )
    return write_snapshot(raw, pickled, html_text, force=force)
