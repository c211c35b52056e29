"""``icr2 reproduce NAME [--backend B] [--limit N] [--out DIR]``: a paper's experiment on your model, beside the
paper's figures; ``icr2 reproduce --list`` lists the registered experiments."""

from __future__ import annotations


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "reproduce",
        help="run a paper's registered experiment (kv-retrieval, lost-in-the-middle, ...) on your model and report "
        "it beside the paper's figures, with 95%% intervals and plots",
        description="Each experiment is a registered protocol (questions and how they are drawn, conditions, "
        "metric, registered size, the paper's figures with its model named), run through icr2 compare's machinery: "
        "its answer cache in --out (run the same command again to resume after a kill), concurrency against a "
        "served backend, and the report (report.json, report.md, report.html with the plot).",
    )
    parser.add_argument("name", nargs="?", help="the experiment (icr2 reproduce --list names them)")
    parser.add_argument("--list", action="store_true", help="list the registered experiments and their protocols")
    parser.add_argument("--backend", help="backend every pipeline's model follows: a shipped name (e.g. "
                        "llama_cpp_server) or a backend file (default: ICR2_BACKEND, else the bundled reader in "
                        "process)")
    parser.add_argument("--limit", type=int, help="the first N questions (default: the registered size)")
    parser.add_argument("--conditions", help="a subset of the conditions: comma-separated names or shell patterns "
                        "(e.g. '75keys@*'); default all (a run on a subset is not at the registered size)")
    parser.add_argument("--out", help="report and cache folder (default runs/reproduce/NAME)")
    parser.add_argument("--max-new-tokens", type=int, help="answer budget (default: the registered one)")
    parser.add_argument("--concurrency", type=int, default=None,
                        help="answers requested at once from a served backend (default: the backend's)")
    parser.add_argument("--train", action="store_true",
                        help="train the experiment's arms first (icr2-fine-tuning), else evaluate what exists")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="settings",
                        help="one of the experiment's own settings (icr2 reproduce --list names them), repeatable")
    parser.add_argument("--reuse-prompt-prefix", action="store_true",
                        help="in-process readers start each reply from the last prompt's key/value cache for the "
                        "prefix the next prompt shares with it (the gold document moved through the same "
                        "distractors): faster, the same greedy replies in float32 and the same answer cache")
    parser.add_argument("--no-progress", action="store_true")
    parser.set_defaults(handler=run)


def run(args) -> int:
    from icr2_components.evaluation.experiments import get_experiment
    from icr2_components.evaluation.experiments.protocol import experiment_names
    from icr2_components.preflight import check_input_if_present, check_output_folder

    check_output_folder(args.out, "--out")
    check_input_if_present(args.backend, "--backend")
    if args.list or not args.name:
        if not args.list:
            raise ValueError(f"name an experiment: one of {', '.join(experiment_names())} (icr2 reproduce --list).")
        for name in experiment_names():
            described = get_experiment(name).describe()
            print(f"{name}: {described['title']} ({described['paper']})\n  conditions: "
                  f"{', '.join(described['conditions'])}\n  variants: "
                  f"{', '.join(v['name'] for v in described['variants'] + described['references'])}; metric: "
                  f"{described['metric']}\n  registered: {described['registered_size']} questions, "
                  f"`{described['registered_command']}`")
            for key, meaning in described["options"].items():
                print(f"  --set {key}=...: {meaning}")
        return 0
    from icr2_components.evaluation.experiments.runner import run_experiment

    report = run_experiment(args.name, backend=args.backend, limit=args.limit, out_dir=args.out,
                            max_new_tokens=args.max_new_tokens, progress=not args.no_progress,
                            conditions=args.conditions, concurrency=args.concurrency, train=args.train,
                            options=_settings(args.settings), reuse_prompt_prefix=args.reuse_prompt_prefix,
                            trainer=_trainer(progress=not args.no_progress) if args.train else None)
    print_report(report, get_experiment(args.name).tables(report))
    return 0


def _trainer(progress: bool):
    """The package's training entry point (what ``icr2 train`` runs) as an experiment's trainer: a recipe file and
    dotted overrides in, the training summary out."""

    def train(recipe: str, overrides: dict) -> dict:
        from icr2_components.training.recipe import load_recipe
        from icr2_components.training.runner import run_recipe

        return run_recipe(load_recipe(recipe, overrides), progress=progress, announce=print)

    return train


def _settings(items: list[str]) -> dict[str, str]:
    settings = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set {item!r}: expected KEY=VALUE.")
        settings[key.strip()] = value
    return settings


def print_report(report: dict, rows: list) -> None:
    from icr2_components.commands._console import make_console
    from icr2_components.commands.compare import print_table

    console = make_console()
    for title, note, header, body in rows:
        print_table(console, f"icr2 reproduce {report['experiment']['name']}: {title}", header, body)
        console.print(note)
    for note in report["experiment"].get("paper_notes") or []:
        console.print(f"paper: {note}")
    run = report["run"]
    if not run["at_registered_size"]:
        from icr2_components.evaluation.experiments import get_experiment

        note = get_experiment(report["experiment"]["name"]).size_note(run)
        console.print(note if note.startswith("a part of") else
                      f"not at the registered size: {report['experiment']['registered_command']}")
    console.print(f"report: {report['files']['html']} {report['files']['markdown']} {report['files']['json']}")
