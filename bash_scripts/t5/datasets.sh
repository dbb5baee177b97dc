# Sourced by bash_scripts/t5/{offline,online}.sh (not run on its own): the dataset argument $1 ->
#   STUDENT, TEACHER, DATA, EVAL_DATA, PRECISION, REPORT_TO defaults (environment values win).
#   sql|math|code|finance       the local workload (data/local/{domain}_{train,eval}.json) with the
#                               T5 demo pair (osd/demo/models/t5, `python -m tests.builders.build_t5_pair`),
#                               on CPU: float32, no wandb, one torch thread (OMP_NUM_THREADS);
#   gsm8k|spider                data/raw_data/ (data/download.sh) with the reference's hub models
#   gbharti/finance-alpaca      (t5-efficient-small from flan-t5-xl), bf16, wandb; the reference's hub
#   code_search_net|code-python names are accepted for the paper's finance and python datasets;
#   any other name              data/raw_data/{name}_{train,test}.json with the hub models.
t5_dataset_defaults() {
    local dataset=$1 train_stem eval_stem
    case "$dataset" in
        sql|math|code|finance)
            STUDENT=${STUDENT:-$ROOT/osd/demo/models/t5/draft}
            TEACHER=${TEACHER:-$ROOT/osd/demo/models/t5/teacher}
            DATA=${DATA:-$ROOT/data/local/${dataset}_train.json}
            EVAL_DATA=${EVAL_DATA:-$ROOT/data/local/${dataset}_eval.json}
            PRECISION=${PRECISION-}
            REPORT_TO=${REPORT_TO:-none}
            # tiny models gain nothing from threads, and on a shared CPU extra threads slow torch down many times
            export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
            return ;;
        gsm8k) train_stem=gsm8k_train eval_stem=gsm8k_test ;;
        spider) train_stem=spider_train eval_stem=spider_validation ;;
        gbharti/finance-alpaca) train_stem=gbharti_finance-alpaca_train eval_stem=gbharti_finance-alpaca_eval ;;
        code_search_net|code-python) train_stem=code_search_net_train eval_stem=code_search_net_test ;;
        *) train_stem=${dataset}_train eval_stem=${dataset}_test ;;
    esac
    STUDENT=${STUDENT:-google/t5-efficient-small}
    TEACHER=${TEACHER:-google/flan-t5-xl}
    DATA=${DATA:-$ROOT/data/raw_data/${train_stem}.json}
    EVAL_DATA=${EVAL_DATA:-$ROOT/data/raw_data/${eval_stem}.json}
    PRECISION=${PRECISION-"--bf16 True"}  # PRECISION= (empty) for CPU or fp32
    REPORT_TO=${REPORT_TO:-wandb}
}
