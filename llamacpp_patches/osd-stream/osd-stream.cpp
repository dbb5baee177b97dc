// llama-osd-stream: serve the queries of a conversation-JSON file with greedy target-only decoding
// ("baseline") and/or greedy speculative decoding, and write one JSON line per query and mode.
//
// This replaces the patched 2023 `examples/speculative` of the OSD reference code. Unlike it, both
// models are loaded once (the reference reloaded them per query and, from the 2nd query on,
// overwrote the target's path with the draft's, so the "target" was the draft), the backend is
// freed once, and every buffer is owned by an RAII object.
//
// Terms (as in osd/spec): the draft proposes gamma tokens; the target verifies them in one forward
// pass; "accepted" counts draft tokens equal to the target's argmax before the first mismatch; each
// verification step also yields one target token (the correction or the bonus token), so a step
// produces accepted + 1 tokens. Greedy: every token is an exact argmax (first index on ties).
//
// Usage and own flags: OSD_USAGE below (`llama-osd-stream --help` prints it after the common flags).

#include "arg.h"
#include "common.h"
#include "log.h"
#include "llama.h"
#include "speculative.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <clocale>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

using json = nlohmann::ordered_json;

static const char * OSD_USAGE = R"(
llama-osd-stream: greedy target-only and speculative decoding over the queries of a file.

  llama-osd-stream -m target.gguf -md draft.gguf --spec-draft-n-max 5 -n 128 -t 1 -c 1024 \
      --osd-data data/local/sql_eval.json --osd-limit 5 --osd-mode both --osd-out runs/sql.jsonl
  llama-osd-stream -m draft.gguf -n 128 -t 1 --osd-mode baseline --osd-data ... --osd-out ...   # a model alone

Own flags (every other flag above is a common llama.cpp flag):
  --osd-data FILE      conversation JSON (a list of records) or JSONL; the query is the first user turn;
                       a record's "prompt_ids" (token ids), when present, are served instead of the template
  --osd-out FILE       JSONL output, one line per (query, mode), flushed after every query
  --osd-limit N        serve the first N records only (default: all)
  --osd-mode M         baseline | speculative | both (default). both: per query, target-only, then
                       draft-only (for c), then speculative, so all three see the same machine load
  --osd-template STR   prompt template with exactly one {query} (default: FastChat vicuna_v1.1, the
                       template of osd/prompting.py); llamacpp_patches/run.py passes the HF tokenizer's
  --osd-draft-vocab F  a JSON list of token ids (a sub-vocabulary draft's config.draft_vocab): the draft
                       proposes its argmax over these tokens only, q = 0 elsewhere, as osd.spec serves it
                       (a GGUF has no sub-vocabulary head: the draft still computes every row)
  --osd-dump-ids       also write prompt_ids and output_ids (to check tokenization and greedy equality)
  --osd-no-warmup      skip the untimed warm-up pass over the first query
)";

static void print_osd_usage(int /*argc*/, char ** /*argv*/) {
    printf("%s", OSD_USAGE);
}

static const char * VICUNA_TEMPLATE =
    "A chat between a curious user and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the user's questions. "
    "USER: {query} ASSISTANT:";

struct osd_args {
    std::string data;
    std::string out;
    long        limit    = -1;
    std::string mode     = "both";
    std::string tmpl     = VICUNA_TEMPLATE;
    std::string draft_vocab; // file: JSON list of token ids; empty = the whole vocabulary
    bool        dump_ids = false;
    bool        warmup   = true;
};

struct osd_query {
    size_t      index;
    std::string id;
    json        dataset; // string or null
    std::string query;
    std::vector<llama_token> prompt_ids; // the record's own "prompt_ids", if any
};

struct osd_result {
    std::vector<llama_token> output;
    int     drafted   = 0;
    int     accepted  = 0;
    int     steps     = 0; // target forward passes after the prefill
    bool    eos       = false;
    int64_t prefill_us = 0;
    int64_t decode_us  = 0;
    int64_t draft_us   = 0; // speculative only: time in the draft, inside decode_us
    int64_t verify_us  = 0; // speculative only: time in target verification, inside decode_us
};

// Take our --osd-* flags out of argv, leaving the rest for common_params_parse.
static osd_args take_osd_args(int & argc, char ** argv) {
    osd_args a;
    bool help = false; // left in argv: common_params_parse prints the usage and exits
    int kept = 1;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg.rfind("--osd-", 0) != 0) {
            help = help || arg == "-h" || arg == "--help" || arg == "--usage";
            argv[kept++] = argv[i];
            continue;
        }
        if (arg == "--osd-dump-ids") {
            a.dump_ids = true;
            continue;
        }
        if (arg == "--osd-no-warmup") {
            a.warmup = false;
            continue;
        }
        if (i + 1 >= argc) {
            throw std::invalid_argument(arg + " expects a value");
        }
        const std::string val = argv[++i];
        if      (arg == "--osd-data")     { a.data  = val; }
        else if (arg == "--osd-out")      { a.out   = val; }
        else if (arg == "--osd-limit")    { a.limit = std::stol(val); }
        else if (arg == "--osd-mode")     { a.mode  = val; }
        else if (arg == "--osd-template") { a.tmpl  = val; }
        else if (arg == "--osd-draft-vocab") { a.draft_vocab = val; }
        else { throw std::invalid_argument("unknown flag " + arg); }
    }
    argc = kept;
    if (help) {
        return a;
    }
    if (a.data.empty() || a.out.empty()) {
        throw std::invalid_argument("--osd-data FILE and --osd-out FILE are required (--help lists every flag)");
    }
    if (a.mode != "baseline" && a.mode != "speculative" && a.mode != "both") {
        throw std::invalid_argument("--osd-mode must be baseline, speculative or both, got '" + a.mode + "'");
    }
    const size_t at = a.tmpl.find("{query}");
    if (at == std::string::npos || a.tmpl.find("{query}", at + 1) != std::string::npos) {
        throw std::invalid_argument("--osd-template must contain {query} exactly once");
    }
    return a;
}

// Read the records (the format of osd/conversations.py) and keep what serving needs.
static std::vector<osd_query> load_queries(const std::string & path, long limit) {
    std::ifstream f(path);
    if (!f) {
        throw std::runtime_error(path + ": cannot open the conversation file");
    }
    std::vector<json> records;
    const bool is_jsonl = path.size() >= 6 && path.compare(path.size() - 6, 6, ".jsonl") == 0;
    if (is_jsonl) {
        for (std::string line; std::getline(f, line);) {
            if (line.find_first_not_of(" \t\r") != std::string::npos) {
                records.push_back(json::parse(line));
            }
        }
    } else {
        const json all = json::parse(f);
        if (!all.is_array()) {
            throw std::runtime_error(path + ": expected a JSON list of conversation records");
        }
        records.assign(all.begin(), all.end());
    }
    std::vector<osd_query> queries;
    for (size_t i = 0; i < records.size() && (limit < 0 || (long) i < limit); ++i) {
        const json & r = records[i];
        const std::string where = path + ", record " + std::to_string(i);
        if (!r.is_object() || !r.contains("conversation") || !r["conversation"].is_array()) {
            throw std::runtime_error(where + ": expected an object with a 'conversation' list");
        }
        const auto & conv = r["conversation"];
        const auto user = std::find_if(conv.begin(), conv.end(), [](const json & t) {
            return t.is_object() && t.value("role", "") == "user" && t.contains("content") && t["content"].is_string();
        });
        if (user == conv.end()) {
            throw std::runtime_error(where + ": the conversation has no user turn with string 'content'");
        }
        const json id      = r.value("id", json());
        const json dataset = r.value("dataset", json());
        const json ids     = r.value("prompt_ids", json::array());
        if (!ids.is_array() || !std::all_of(ids.begin(), ids.end(), [](const json & t) { return t.is_number_integer(); })) {
            throw std::runtime_error(where + ": 'prompt_ids' must be a list of token ids");
        }
        queries.push_back({
            i,
            id.is_string() ? id.get<std::string>() : std::to_string(i),
            dataset.is_string() ? dataset : json(),
            (*user)["content"].get<std::string>(),
            ids.get<std::vector<llama_token>>(),
        });
    }
    return queries;
}

// Prompt ids: BOS once, as osd.prompting.encode_prompt (the model adds BOS unless the text has it).
static std::vector<llama_token> encode_prompt(const llama_vocab * vocab, const std::string & tmpl, const std::string & query) {
    std::string text = tmpl;
    text.replace(text.find("{query}"), 7, query);
    const llama_token bos = llama_vocab_bos(vocab);
    const bool has_bos_text = bos != LLAMA_TOKEN_NULL && text.rfind(common_token_to_piece(vocab, bos, true), 0) == 0;
    return common_tokenize(vocab, text, /*add_special=*/ !has_bos_text, /*parse_special=*/ true);
}

// i: index in the last batch (-1: its last token)
static llama_token argmax(llama_context * ctx, int32_t i, int32_t n_vocab) {
    const float * logits = llama_get_logits_ith(ctx, i);
    if (logits == nullptr) {
        throw std::logic_error("no logits at batch index " + std::to_string(i));
    }
    return (llama_token) (std::max_element(logits, logits + n_vocab) - logits);
}

// The argmax over `ids` only (a sub-vocabulary draft); over every token when `ids` is empty.
static llama_token argmax_in(llama_context * ctx, int32_t i, int32_t n_vocab, const std::vector<llama_token> & ids) {
    if (ids.empty()) {
        return argmax(ctx, i, n_vocab);
    }
    const float * logits = llama_get_logits_ith(ctx, i);
    return *std::max_element(ids.begin(), ids.end(), [&](llama_token a, llama_token b) { return logits[a] < logits[b]; });
}

// --osd-draft-vocab: the token ids of a JSON list, each in [0, n_vocab), sorted and unique.
static std::vector<llama_token> load_draft_vocab(const std::string & path, int32_t n_vocab) {
    if (path.empty()) {
        return {};
    }
    std::ifstream f(path);
    if (!f) {
        throw std::runtime_error(path + ": cannot open the draft vocabulary (--osd-draft-vocab)");
    }
    const json j = json::parse(f, nullptr, /*allow_exceptions=*/ false);
    if (!j.is_array() || j.empty()) {
        throw std::runtime_error(path + ": --osd-draft-vocab needs a non-empty JSON list of token ids");
    }
    std::vector<llama_token> ids;
    for (const json & t : j) {
        if (!t.is_number_integer() || t.get<long>() < 0 || t.get<long>() >= n_vocab) {
            throw std::runtime_error(path + ": token id " + t.dump() + " is not in [0, " + std::to_string(n_vocab) + ")");
        }
        ids.push_back(t.get<llama_token>());
    }
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    return ids;
}

// Decode tokens at positions pos0.. on sequence 0; logits only for the last one unless all_logits.
static void decode(llama_context * ctx, common_batch & batch, const llama_token * tokens, size_t n, llama_pos pos0, bool all_logits) {
    const size_t n_batch = llama_n_batch(ctx);
    for (size_t off = 0; off < n; off += n_batch) {
        const size_t end = std::min(n, off + n_batch);
        batch.clear();
        for (size_t i = off; i < end; ++i) {
            batch.add(tokens[i], pos0 + (llama_pos) i, 0, all_logits || i + 1 == n);
        }
        if (llama_process(ctx, LLAMA_PROCESS_TYPE_DECODE, batch.get()) != 0) {
            throw std::runtime_error("llama_process failed at position " + std::to_string(pos0 + off));
        }
    }
}

static void clear_memory(llama_context * ctx) {
    if (ctx) {
        llama_memory_clear(llama_get_memory(ctx), true);
    }
}

// Greedy target-only decoding; the last prompt token is left for the first decode step, as in
// speculative(), so that both modes time the same `n_predict` target steps.
static osd_result run_baseline(llama_context * ctx_tgt, common_batch & batch, const std::vector<llama_token> & prompt, int n_predict) {
    const llama_vocab * vocab = llama_model_get_vocab(llama_get_model(ctx_tgt));
    const int32_t n_vocab = llama_vocab_n_tokens(vocab);
    osd_result r;
    clear_memory(ctx_tgt);

    const int64_t t0 = ggml_time_us();
    decode(ctx_tgt, batch, prompt.data(), prompt.size() - 1, 0, false);
    const int64_t t1 = ggml_time_us();

    llama_token id_last = prompt.back();
    llama_pos   n_past  = (llama_pos) prompt.size() - 1;
    while ((int) r.output.size() < n_predict && !r.eos) {
        decode(ctx_tgt, batch, &id_last, 1, n_past++, true);
        id_last = argmax(ctx_tgt, 0, n_vocab);
        r.output.push_back(id_last);
        r.eos = llama_vocab_is_eog(vocab, id_last);
        r.steps++;
    }
    r.prefill_us = t1 - t0;
    r.decode_us  = ggml_time_us() - t1;
    return r;
}

// Greedy speculative decoding: draft k = min(gamma, budget - 1) tokens, verify [id_last, d_1..d_k]
// in one target pass, keep the accepted prefix plus the target's own next token, roll both KV
// caches back to the kept sequence. The output is the target's greedy output token for token.
static osd_result run_speculative(llama_context * ctx_tgt, llama_context * ctx_dft, common_batch & batch_tgt,
                                  common_batch & batch_dft, const std::vector<llama_token> & prompt, int n_predict, int gamma,
                                  const std::vector<llama_token> & draft_vocab) {
    const llama_vocab * vocab = llama_model_get_vocab(llama_get_model(ctx_tgt));
    const int32_t n_vocab = llama_vocab_n_tokens(vocab);
    osd_result r;
    clear_memory(ctx_tgt);
    clear_memory(ctx_dft);

    // seq: prompt + output so far. Invariant at the top of each step: the target's KV cache holds
    // seq[0 .. n-2] (the last token, id_last, is fed next); the draft's holds seq[0 .. n_dft-1].
    std::vector<llama_token> seq(prompt);
    const int64_t t0 = ggml_time_us();
    decode(ctx_tgt, batch_tgt, seq.data(), seq.size() - 1, 0, false);
    decode(ctx_dft, batch_dft, seq.data(), seq.size() - 1, 0, false);
    size_t n_dft = seq.size() - 1;
    const int64_t t1 = ggml_time_us();

    std::vector<llama_token> step; // [id_last, d_1 .. d_k]
    while ((int) r.output.size() < n_predict && !r.eos) {
        const llama_pos n_past = (llama_pos) seq.size() - 1;
        const int k = std::min(gamma, n_predict - (int) r.output.size() - 1);

        const int64_t td = ggml_time_us();
        step.assign(1, seq.back());
        if (k > 0) {
            // catch the draft up (after a fully accepted step it lacks d_k), then propose k tokens
            decode(ctx_dft, batch_dft, seq.data() + n_dft, seq.size() - n_dft, (llama_pos) n_dft, false);
            for (int i = 0; i < k; ++i) {
                step.push_back(argmax_in(ctx_dft, -1, n_vocab, draft_vocab));
                if (i + 1 < k) {
                    decode(ctx_dft, batch_dft, &step.back(), 1, n_past + 1 + i, false);
                }
            }
            n_dft = (size_t) n_past + k; // the draft holds up to d_{k-1}
        }
        const int64_t tv = ggml_time_us();
        decode(ctx_tgt, batch_tgt, step.data(), step.size(), n_past, true);

        // the target's argmax after step[i] checks draft token step[i + 1]
        int n_acc = 0;
        llama_token next = argmax(ctx_tgt, 0, n_vocab);
        while (n_acc < k && next == step[n_acc + 1]) {
            ++n_acc;
            next = argmax(ctx_tgt, n_acc, n_vocab);
        }
        r.verify_us += ggml_time_us() - tv;
        r.draft_us  += tv - td;

        r.drafted  += k;
        r.accepted += n_acc;
        r.steps++;
        for (int i = 1; i <= n_acc + 1 && !r.eos; ++i) {
            const llama_token t = i <= n_acc ? step[i] : next;
            seq.push_back(t);
            r.output.push_back(t);
            r.eos = llama_vocab_is_eog(vocab, t);
        }
        // drop rejected draft tokens from both caches
        const llama_pos keep = (llama_pos) seq.size() - 1;
        llama_memory_seq_rm(llama_get_memory(ctx_tgt), 0, keep, -1);
        llama_memory_seq_rm(llama_get_memory(ctx_dft), 0, keep, -1);
        n_dft = std::min(n_dft, (size_t) keep);
    }
    r.prefill_us = t1 - t0;
    r.decode_us  = ggml_time_us() - t1;
    return r;
}

static json result_line(const osd_query & q, const std::string & mode, const osd_result & r, const common_params & params,
                        const std::string & model, const std::string & draft_model, const std::vector<llama_token> & prompt,
                        bool dump_ids, size_t n_draft_vocab) {
    const double decode_ms = r.decode_us / 1e3;
    const size_t n_gen = r.output.size();
    json j = {
        {"id", q.id},
        {"index", q.index},
        {"dataset", q.dataset},
        {"mode", mode},
        {"model", model},
        {"draft_model", mode == "speculative" ? json(draft_model) : json()},
        {"gamma", mode == "speculative" ? params.speculative.draft.n_max : 0},
        {"draft_vocab", mode == "speculative" && n_draft_vocab > 0 ? json(n_draft_vocab) : json()},
        {"n_threads", params.cpuparams.n_threads},
        {"prompt_from", q.prompt_ids.empty() ? "template" : "record"},
        {"prompt_tokens", prompt.size()},
        {"generated_tokens", n_gen},
        {"eos", r.eos},
        {"steps", r.steps},
        {"drafted", r.drafted},
        {"accepted", r.accepted},
        {"acceptance_rate", r.drafted > 0 ? json((double) r.accepted / r.drafted) : json()},
        {"prefill_ms", r.prefill_us / 1e3},
        {"decode_ms", decode_ms},
        {"wall_ms", (r.prefill_us + r.decode_us) / 1e3},
        {"ms_per_token", n_gen > 0 ? json(decode_ms / n_gen) : json()},
        {"draft_ms", r.draft_us / 1e3},
        {"verify_ms", r.verify_us / 1e3},
    };
    if (dump_ids) {
        j["prompt_ids"] = prompt;
        j["output_ids"] = r.output;
    }
    return j;
}

static std::string canonical(const std::string & path) {
    return path.empty() ? path : std::filesystem::weakly_canonical(path).string();
}

// Serve every query in order with both models already loaded; one flushed JSON line per (query, mode).
static void serve(const osd_args & a, const std::vector<osd_query> & queries, const common_params & params,
                  llama_context * ctx_tgt, llama_context * ctx_dft, const std::vector<llama_token> & draft_vocab) {
    std::ofstream out(a.out);
    if (!out) {
        throw std::runtime_error(a.out + ": cannot open the output file");
    }
    const llama_vocab * vocab = llama_model_get_vocab(llama_get_model(ctx_tgt));
    const int gamma = params.speculative.draft.n_max;
    common_batch batch_tgt(ctx_tgt);
    common_batch batch_dft = ctx_dft ? common_batch(ctx_dft) : common_batch();
    const std::string model_path = canonical(params.model.path);
    const std::string draft_path = ctx_dft ? canonical(params.speculative.draft.mparams.path) : "";
    const uint32_t n_ctx = llama_n_ctx(ctx_tgt);

    // tokenize and check every prompt before anything is timed
    const int32_t n_vocab = llama_vocab_n_tokens(vocab);
    std::vector<std::vector<llama_token>> prompts;
    for (const osd_query & q : queries) {
        prompts.push_back(q.prompt_ids.empty() ? encode_prompt(vocab, a.tmpl, q.query) : q.prompt_ids);
        const auto & p = prompts.back();
        const std::string where = a.data + ", record " + std::to_string(q.index);
        if (p.empty() || std::any_of(p.begin(), p.end(), [&](llama_token t) { return t < 0 || t >= n_vocab; })) {
            throw std::runtime_error(where + ": the prompt needs token ids in [0, " + std::to_string(n_vocab) + ")");
        }
        if (p.size() + params.n_predict + gamma + 1 > n_ctx) {
            throw std::runtime_error(where + ": the prompt (" + std::to_string(p.size()) + " tokens) + -n " +
                                     std::to_string(params.n_predict) + " + gamma does not fit -c " + std::to_string(n_ctx));
        }
    }
    // one untimed pass over the first query, so that the first timed one does not pay for cold caches
    if (!queries.empty() && a.warmup) {
        const int n_warm = std::min(params.n_predict, 8);
        if (a.mode != "speculative") {
            run_baseline(ctx_tgt, batch_tgt, prompts[0], n_warm);
        }
        if (a.mode == "both") {
            run_baseline(ctx_dft, batch_dft, prompts[0], n_warm);
        }
        if (a.mode != "baseline") {
            run_speculative(ctx_tgt, ctx_dft, batch_tgt, batch_dft, prompts[0], n_warm, gamma, draft_vocab);
        }
    }
    for (size_t i = 0; i < queries.size(); ++i) {
        const osd_query & q = queries[i];
        const std::vector<llama_token> & prompt = prompts[i];
        if (a.mode != "speculative") {
            const osd_result r = run_baseline(ctx_tgt, batch_tgt, prompt, params.n_predict);
            out << result_line(q, "baseline", r, params, model_path, draft_path, prompt, a.dump_ids, draft_vocab.size()).dump() << "\n";
        }
        if (a.mode == "both") {
            // the draft alone, under the same machine load, for c = draft / target ms per token
            const osd_result r = run_baseline(ctx_dft, batch_dft, prompt, params.n_predict);
            out << result_line(q, "baseline", r, params, draft_path, draft_path, prompt, a.dump_ids, draft_vocab.size()).dump() << "\n";
        }
        if (a.mode != "baseline") {
            const osd_result r = run_speculative(ctx_tgt, ctx_dft, batch_tgt, batch_dft, prompt, params.n_predict, gamma, draft_vocab);
            out << result_line(q, "speculative", r, params, model_path, draft_path, prompt, a.dump_ids, draft_vocab.size()).dump() << "\n";
            LOG_INF("%s: query %zu (%s): %d/%d draft tokens accepted\n", __func__, q.index, q.id.c_str(), r.accepted, r.drafted);
        }
        out.flush();
    }
}

static int run(int argc, char ** argv) {
    osd_args a = take_osd_args(argc, argv);
    const bool do_spec = a.mode != "baseline";

    common_params params;
    common_init();
    if (!common_params_parse(argc, argv, params, LLAMA_EXAMPLE_SPECULATIVE, print_osd_usage)) {
        return 1;
    }
    if (params.n_predict < 1) {
        throw std::invalid_argument("pass -n N, the maximum number of new tokens per query (got " + std::to_string(params.n_predict) + ")");
    }
    if (do_spec && !params.speculative.has_dft()) {
        throw std::invalid_argument("--osd-mode " + a.mode + " needs a draft model (-md FILE)");
    }
    const int gamma = params.speculative.draft.n_max;
    if (do_spec && gamma < 1) {
        throw std::invalid_argument("--spec-draft-n-max (gamma) must be >= 1");
    }
    // the target verifies gamma + 1 positions of one sequence in one pass
    params.n_outputs_max         = std::max(gamma + 1, 1);
    params.n_outputs_max_per_seq = std::max(gamma + 1, 1);

    const std::vector<osd_query> queries = load_queries(a.data, a.limit);

    llama_backend_init();
    llama_numa_init(params.numa);

    auto init_tgt = common_init_from_params(params);
    llama_context * ctx_tgt = init_tgt->context();
    if (ctx_tgt == nullptr) {
        throw std::runtime_error("failed to load the target model " + params.model.path);
    }
    const llama_vocab * vocab = llama_model_get_vocab(init_tgt->model());

    common_speculative_init_result_ptr init_dft;
    llama_context * ctx_dft = nullptr;
    if (do_spec) {
        common_params params_dft = common_base_params_to_speculative(params);
        init_dft = common_speculative_init_from_params(params_dft, init_tgt->model(), ctx_tgt);
        ctx_dft = init_dft->context();
        if (ctx_dft == nullptr) {
            throw std::runtime_error("failed to load the draft model " + params.speculative.draft.mparams.path);
        }
        const llama_vocab * vocab_dft = llama_model_get_vocab(init_dft->model());
        if (llama_vocab_n_tokens(vocab_dft) != llama_vocab_n_tokens(vocab)) {
            throw std::runtime_error("the draft's vocabulary has " + std::to_string(llama_vocab_n_tokens(vocab_dft)) +
                                     " tokens, the target's " + std::to_string(llama_vocab_n_tokens(vocab)) +
                                     "; speculative decoding needs a shared tokenizer");
        }
        for (llama_context * ctx : {ctx_tgt, ctx_dft}) {
            if (common_context_can_seq_rm(ctx) != COMMON_CONTEXT_SEQ_RM_TYPE_PART) {
                throw std::runtime_error("llama-osd-stream needs models whose KV cache can drop a suffix (transformers); "
                                         "recurrent/hybrid models are not supported");
            }
        }
    }

    serve(a, queries, params, ctx_tgt, ctx_dft, load_draft_vocab(a.draft_vocab, llama_vocab_n_tokens(vocab)));

    LOG_INF("%s: wrote %zu queries to %s\n", __func__, queries.size(), a.out.c_str());

    // the draft context refers to the target's (ctx_other): free it first, and both before the backend
    init_dft.reset();
    init_tgt.reset();
    llama_backend_free();
    return 0;
}

int main(int argc, char ** argv) {
    std::setlocale(LC_NUMERIC, "C");
    try {
        return run(argc, argv);
    } catch (const std::exception & e) {
        fprintf(stderr, "llama-osd-stream: error: %s\n", e.what());
        return 1;
    }
}
