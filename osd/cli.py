"""Console scripts (pyproject.toml's [project.scripts]): each runs a module's `main()` with exit status 0,
a user error as one line and exit status 1 (`osd.user_errors`). The flags live in `osd.distill.flags`."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from osd.user_errors import run_main


def _exit_status_zero(module: str) -> Callable[[], int]:
    """A console-script target running `module.main()` with exit status 0: the mains return their
    metrics, which `sys.exit` would print and turn into status 1. A user error (a used --output_dir,
    a bad data file, a missing model...) is one error line, exit status 1 (`osd.user_errors`)."""

    def run() -> int:
        return run_main(importlib.import_module(module).main, module)

    return run


train = _exit_status_zero("osd.train")  # osd-train
online_demo = _exit_status_zero("osd.demo.online_demo")  # osd-online-demo
route = _exit_status_zero("osd.distill.routing")  # osd-route
plot = _exit_status_zero("osd.plots")  # osd-plot
dashboard = _exit_status_zero("osd.dashboard")  # osd-dashboard
demo_target = _exit_status_zero("osd.demo.target")  # osd-demo-target
