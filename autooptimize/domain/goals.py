"""The goals a replay's figures are held to beside the bin-pack's (:mod:`autooptimize.domain.simulate`'s
:class:`~autooptimize.domain.simulate.Figures`): mean live files, write amplification, and the layout at the end.

Pure: the standard library only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autooptimize.domain.simulate import Figures

__all__ = ["END_EXCESS_SLACK", "LIVE_FILES_GOAL", "WRITE_AMPLIFICATION_GOAL", "end_excess_limit", "end_layout_holds",
           "end_shortfall"]


#: The file goal ``suggest_tuning`` holds a tuning to: mean live files at most this times the bin-pack's.
LIVE_FILES_GOAL = 1.05

#: The write amplification goal a tuning is held to when no candidate keeps the file goal.
WRITE_AMPLIFICATION_GOAL = 1.5

#: Slack on the end excess MSE goal (bytes²): the bin-pack's own figure is often 0, and 10 % of 0 is nothing.
END_EXCESS_SLACK = 1 << 40


def end_excess_limit(base: Figures) -> float:
    """The most excess MSE at the end the goal allows beside the bin-pack's ``base``."""
    return _excess_limit(base.end_excess_mse)


def _excess_limit(base_excess_mse: float) -> float:
    return 1.1 * base_excess_mse + END_EXCESS_SLACK


def end_layout_holds(f: Figures, base: Figures) -> bool:
    """Files and excess MSE at the end within 10 % of the bin-pack's (``END_EXCESS_SLACK`` on the MSE)."""
    return f.end_files <= 1.1 * base.end_files and f.end_excess_mse <= end_excess_limit(base)


def end_shortfall(files: int, excess_mse: float, base_files: int, base_excess_mse: float) -> float:
    """How far an end layout of ``files`` and ``excess_mse`` misses the goal beside the bin-pack's, summed as
    fractions: files over 1.1× (none when the bin-pack ended with none), excess MSE over 1.1× (+ 1 MiB²)."""
    over_files = files / (1.1 * base_files) - 1 if base_files else 0.0
    over_excess = excess_mse / _excess_limit(base_excess_mse) - 1
    return max(0.0, over_files) + max(0.0, over_excess)
