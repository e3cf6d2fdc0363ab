"""Run the user's training script in-process for N optimizer steps and measure its memory.

Modules: `sandbox` (reading, argv, signals, the stop exception), `session` (the instrumentation:
dispatch-level tracking, hooks, phases), `cuda` (allocator stats and history), `detect` (the HF
model and plan the script trains), `trl_phases` (TRL's post-training trainers: their generation and reference
phases, task and knobs), `result` (what a run measured), `run` (the run itself).
"""

from memdoc.probe.script.result import ScriptResult
from memdoc.probe.script.run import run_script
from memdoc.probe.script.sandbox import check_script, is_script_target

__all__ = ["ScriptResult", "check_script", "is_script_target", "run_script"]
