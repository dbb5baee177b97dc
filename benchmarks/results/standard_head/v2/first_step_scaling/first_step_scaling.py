r"""The scratch script behind first_step_scaling/*.json (issue 46), kept as it ran, its paths made flags: a head
trained with one chain step (--ttt 1) on the first --examples examples of the general corpus (4 a step, AdamW lr 1e-3,
10 warmup steps, cosine to 10% over --steps), scored at --evals steps on the first 8 prompts of each domain's eval
recording (its states added, `record --features`): top-1 agreement with the target's argmax and KL(target || head)
on V' at chain step 1, teacher-forced.

    python first_step_scaling.py --name n3000 --examples 3000 --teacher osd/demo/models/head.build/teacher \
        --recordings RECORDINGS_DIR --out_dir OUT
"""
import argparse, json, time, torch
from functools import partial
from pathlib import Path
from transformers import AutoModelForCausalLM
from osd.demo.build_head import HeadBuildConfig, init_head, IGNORE, TeacherCache
from osd.demo.general_corpus import load_general_corpus, general_token_ids
from osd.online.head_loss import FeatureQuery, head_distillation_loss, ttt_logits
from osd.distill.losses import forward_kl
from osd.distill.lm_training import lr_at, batch_indices
from osd.analysis.recording import load_recording
from osd.spec.cached_model import layer_inputs

p = argparse.ArgumentParser()
p.add_argument("--name", required=True); p.add_argument("--examples", type=int, default=3000)
p.add_argument("--steps", type=int, default=750); p.add_argument("--evals", default="250,500,750")
p.add_argument("--lr", type=float, default=1e-3); p.add_argument("--ttt", type=int, default=1)
p.add_argument("--fc_norm", type=int, default=0)
p.add_argument("--teacher", required=True); p.add_argument("--recordings", required=True); p.add_argument("--out_dir", required=True)
a = p.parse_args()
torch.set_num_threads(1)
out = Path(a.out_dir) / a.name; out.mkdir(parents=True, exist_ok=True)
cfg = HeadBuildConfig()
tok, ex, m = load_general_corpus(cfg)
ex = [e for e in ex if any(y != IGNORE for y in e[1][2:])]
target = AutoModelForCausalLM.from_pretrained(cfg.target, dtype=torch.bfloat16).eval()
ids, cov = general_token_ids(cfg, tok)
head = init_head(target, ids, 0)
if a.fc_norm:
    from transformers.models.llama.modeling_llama import LlamaRMSNorm
    H = head.config.hidden_size
    head.fc_norm = torch.nn.ModuleList([LlamaRMSNorm(H, eps=1e-5) for _ in range(3)])
    fc = head.fc
    head.fuse = lambda f: fc(torch.cat([n(c) for n, c in zip(head.fc_norm, f.to(fc.weight.dtype).chunk(3, -1))], -1))
embed = target.get_input_embeddings(); rows = target.get_output_embeddings().weight[head.token_ids]
teacher = TeacherCache(target, head.target_layers, ex, Path(a.teacher))
evpath = Path(a.out_dir) / "evalset.pt"
if not evpath.exists():
    ev = []
    with torch.no_grad():
        for d in ("sql", "math", "code", "finance"):
            r = load_recording(f"{a.recordings}/{d}_eval")
            for pr in r.prompts[:8]:
                toks = torch.tensor(pr.prompt_ids + pr.output_ids); T = max(len(pr.prompt_ids), 2)
                o = target(input_ids=toks[None], output_hidden_states=True)
                lg = o.logits[0, T - 1 : len(toks) - 1].float()  # predicts tokens T..S-1
                ev.append({"d": d, "tokens": toks, "T": T, "features": layer_inputs(o.hidden_states, head.target_layers)[0][:-1].to(torch.bfloat16),
                           "argmax": lg.argmax(-1), "logits": lg[:, ids].to(torch.bfloat16)})
    torch.save(ev, evpath)
ev = torch.load(evpath)
def evaluate():
    res = {}
    with torch.no_grad():
        for e in ev:
            hl = ttt_logits(head, embed, e["tokens"], e["features"].float(), 1)[0][e["T"] - 2 : len(e["tokens"]) - 2]
            top = (head.token_ids[hl.argmax(-1)] == e["argmax"]).float()
            lp = torch.log_softmax(e["logits"].float(), -1); lq = torch.log_softmax(hl, -1)
            k = (lp.exp() * (lp - lq)).sum(-1)
            s = res.setdefault(e["d"], [0, 0, 0]); s[0] += top.sum().item(); s[1] += k.sum().item(); s[2] += len(top)
    r = {d: (round(v[0] / v[2], 4), round(v[1] / v[2], 4)) for d, v in res.items()}
    r["mean_top1"] = round(sum(v[0] for v in r.values()) / 4, 4); r["mean_kl"] = round(sum(v[1] for d, v in r.items() if d != "mean_top1") / 4, 4)
    return r
loss_fn = partial(head_distillation_loss, embed=embed, divergence=forward_kl, steps=a.ttt)
opt = torch.optim.AdamW(head.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.01)
def query(i):
    s = teacher(i)
    with torch.no_grad(): logits = s["final"].to(rows) @ rows.T
    return FeatureQuery(s["tokens"], s["features"], s["positions"], logits)
evals = {int(x) for x in a.evals.split(",")}; log = []; recent = []; t0 = time.time()
for step in range(a.steps):
    for g in opt.param_groups: g["lr"] = lr_at(step, a.steps, a.lr, 10)
    idx = batch_indices(a.examples, 4, step, 0, "head")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = loss_fn(head, [query(i) for i in idx], torch.Tensor.backward)
    torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0); opt.step(); opt.zero_grad(set_to_none=True)
    recent = (recent + [loss.item()])[-50:]
    if step + 1 in evals:
        row = {"step": step + 1, "epochs": (step + 1) * 4 / a.examples, "train_loss50": sum(recent) / len(recent), "wall": time.time() - t0, **evaluate()}
        log.append(row); print(json.dumps(row), flush=True)
        (out / "log.json").write_text(json.dumps({"args": vars(a), "evals": log}, indent=1))
