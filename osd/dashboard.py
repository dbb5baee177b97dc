"""The acceptance-rate dashboard as code: a wandb workspace (wandb-workspaces) over a project's osd runs.

    python -m osd.dashboard --entity E --project P --print       # the workspace spec as JSON, no network
    python -m osd.dashboard --entity E --project P               # creates the workspace, prints its URL
    python -m osd.dashboard --entity E --project P --url URL     # updates the workspace at URL (from a save)

Sections and panels (line plots; keys as wandb names them: osd.metric_keys):
- Online, over queries served (`train/queries_served`): alpha of each log entry; cumulative and windowed
  alpha; alpha per dataset, per topic and per language (regular expressions over `train/alpha/{field}/...`,
  so every group of every run shows up); accepted length.
- Online updates, over queries served: the distillation loss of the updates; the updates' time as a
  share of serving time (also the background worker's share, --online_background_update).
- Evaluation, over Trainer steps (`train/global_step`): eval alpha (the first point is "Standard" SD),
  eval alpha per dataset, topic and language, eval accepted length.

Saving needs wandb credentials (`wandb login`); `--print` and `build_workspace` need none.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from osd.metric_keys import (
    ACCEPTED_LENGTH,
    ALPHA,
    ALPHA_CUMULATIVE,
    ALPHA_WINDOW,
    BACKGROUND_UPDATE_SHARE,
    EVAL_PREFIX,
    ONLINE_LOSS,
    QUERIES_SERVED,
    UPDATE_TIME_SHARE,
    group_key,
    wandb_key,
)
from osd.user_errors import run_main

if TYPE_CHECKING:  # wandb-workspaces comes with the [wandb] extra: imported when a workspace is built
    from wandb_workspaces.workspaces import Workspace

NAME = "OSD acceptance rate"
ONLINE_X = wandb_key(QUERIES_SERVED)
EVAL_X = "train/global_step"  # HF's WandbCallback adds it to every row (and makes it the default x-axis)
GROUP_TITLES = {"dataset": "per dataset", "topic": "per topic", "language": "per language"}


@dataclass(frozen=True)
class PanelSpec:
    """One line plot over `x`: the wandb keys `y`, or every key that `regex` matches."""

    title: str
    x: str
    y: tuple[str, ...] = ()
    regex: str | None = None


def _group_panels(prefix: str, x: str) -> list[PanelSpec]:
    """Alpha per dataset / topic / language: a regex over `{prefix}alpha/{field}/` keys each."""
    return [
        PanelSpec(f"{'eval ' if prefix else ''}alpha {title}", x,
                  regex=f"^{re.escape(wandb_key(prefix + group_key(field, '')))}.+$")
        for field, title in GROUP_TITLES.items()
    ]  # fmt: skip


def sections() -> dict[str, list[PanelSpec]]:
    """The dashboard: section name -> panels, top to bottom."""
    return {
        "Online: acceptance rate over queries served": [
            PanelSpec("alpha (queries since the previous log entry)", ONLINE_X, (wandb_key(ALPHA),)),
            PanelSpec("cumulative and windowed alpha", ONLINE_X,
                      (wandb_key(ALPHA_CUMULATIVE), wandb_key(ALPHA_WINDOW))),
            *_group_panels("", ONLINE_X),
            PanelSpec("accepted length (draft tokens per verification)", ONLINE_X, (wandb_key(ACCEPTED_LENGTH),)),
        ],
        "Online: distillation updates": [
            PanelSpec("online loss", ONLINE_X, (wandb_key(ONLINE_LOSS),)),
            PanelSpec("update time / serving time", ONLINE_X,
                      (wandb_key(UPDATE_TIME_SHARE), wandb_key(BACKGROUND_UPDATE_SHARE))),
        ],
        "Evaluation: alpha on the eval set": [
            PanelSpec("eval alpha (step 0: Standard SD)", EVAL_X, (wandb_key(EVAL_PREFIX + ALPHA),)),
            *_group_panels(EVAL_PREFIX, EVAL_X),
            PanelSpec("eval accepted length", EVAL_X, (wandb_key(EVAL_PREFIX + ACCEPTED_LENGTH),)),
        ],
    }  # fmt: skip


def build_workspace(entity: str, project: str, name: str = NAME) -> Workspace:
    """The wandb_workspaces Workspace of `sections()` (built offline)."""
    import wandb_workspaces.reports.v2 as wr
    import wandb_workspaces.workspaces as ws

    def line_plot(p: PanelSpec) -> wr.LinePlot:
        return wr.LinePlot(title=p.title, x=p.x, y=list(p.y), metric_regex=p.regex, smoothing_type="none")

    return ws.Workspace(
        entity=entity,
        project=project,
        name=name,
        sections=[
            ws.Section(
                name=title,
                panels=[line_plot(p) for p in panels],
                is_open=True,
                panel_settings=ws.SectionPanelSettings(x_axis=panels[0].x),
            )
            for title, panels in sections().items()
        ],  # fmt: skip
        settings=ws.WorkspaceSettings(x_axis=ONLINE_X),
    )


def spec_json(workspace: Workspace) -> str:
    """The view spec that saving the workspace sends (wandb_workspaces' own serialisation, as `save` does)."""
    return workspace._to_model().spec.model_dump_json(by_alias=True, exclude_none=True, indent=1)


def save(workspace: Workspace, url: str | None = None) -> str:
    """Create the workspace, or (url) replace the sections of the saved one at `url`; its URL."""
    if url is not None:
        import wandb_workspaces.workspaces as ws

        saved = ws.Workspace.from_url(url)
        saved.name, saved.sections, saved.settings = workspace.name, workspace.sections, workspace.settings
        workspace = saved
    return workspace.save().url


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--entity", required=True, help="wandb entity (user or team) of the project")
    parser.add_argument("--project", required=True, help="wandb project the osd runs log to")
    parser.add_argument("--name", default=NAME, help="the workspace's name")
    parser.add_argument("--url", help="update the workspace saved at this URL instead of creating one")
    parser.add_argument(
        "--print", "--dry_run", dest="print_only", action="store_true",
        help="print the workspace spec (JSON) and the panel list; nothing is sent",
    )  # fmt: skip
    args = parser.parse_args(argv)
    workspace = build_workspace(args.entity, args.project, args.name)
    if args.print_only:
        print(spec_json(workspace))
        for title, panels in sections().items():
            print(f"\n{title}")
            for p in panels:
                print(f"  {p.title}: {p.regex or ', '.join(p.y)} over {p.x}")
        return
    from osd.distill.callbacks import wandb_key_configured  # with transformers: only when saving

    if not wandb_key_configured():  # else wandb asks for a key on the terminal, or fails with a traceback
        raise ValueError(
            "saving the workspace needs a wandb API key: run `wandb login` or set WANDB_API_KEY "
            "(or --print the spec, which needs none)"
        )
    import wandb

    try:
        url = save(workspace, args.url)
    except wandb.errors.Error as e:
        raise ValueError(f"wandb did not save the workspace ({' '.join(str(e).split())})") from e
    print(f"workspace saved: {url}")


if __name__ == "__main__":
    raise SystemExit(run_main(main, "osd.dashboard"))
