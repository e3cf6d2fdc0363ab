"""memdoc's self-contained HTML: the `--html FILE` report page and the allocation timeline, as inline SVG.

`page.report_html` draws a command's JSON report; `timeline_svg.timeline_svg` the allocation
timeline (also `memdoc.render.timeline`'s page); `charts` and `svg` are the building blocks.
No scripts, no external assets, no network: a page opens the same offline and can be mailed.
"""

from memdoc.render.html.page import report_html
from memdoc.render.html.timeline_svg import timeline_svg

__all__ = ["report_html", "timeline_svg"]
