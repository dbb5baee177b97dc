"""The online loop of OSD, written once: serve -> record stats -> buffer -> update when due -> refresh.

- `config`: `OnlineArguments`, the loop's flags (osd.train, osd.serving, the main job, online_replay);
- `loop`: `OnlineLoop` and the server interface (`Query`, `Served`, `Server`);
- `engine_server`: the osd engine as a server (one query or a batch);
- `updater`: `DraftUpdater`, buffers, distillation steps, replay, background thread, serving copies;
- `buffer`: what an update keeps of a served query, and the distillation loss on it;
- `head_loss`: what an EAGLE-3 head's update keeps (`FeatureQuery`), and its loss (the training-time test, with
  Aurora's term on the rejected proposals as an option);
- `records`: per-query acceptance (`QueryStats`) and the log entries (`OnlineState`).

The other servers live with their tools: vLLM in `osd.serving.online`, a replay of a recording in
`osd.analysis.replay_server`; the Trainer that drives the loop in `osd.distill.online`.
"""
