import json
import subprocess
import sys

import pytest

from robustvit.cli import main
from robustvit.models import create_model, save_checkpoint


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("args,match", [
    (["eval", "--model", "vit_cifar_tiyn", "--data", "synthshapes:test", "--out", "X"], "unknown model 'vit_cifar_tiyn'; did you mean vit_cifar_tiny"),
    (["eval", "--model", "resnet_cifar18", "--data", "synthshapez:test", "--out", "X"], "unknown data source 'synthshapez'"),
    (["eval", "--model", "resnet_cifar18", "--data", "synthshapes:test", "--suite", "clena", "--out", "X"], "did you mean clean"),
    (["eval", "--model", "resnet_cifar18", "--data", "folder:/no/such/dir", "--out", "X"], "does not exist"),
    (["eval", "--model", "resnet_cifar18", "--data", "synthshapes:test,count=10", "--limit", "11", "--out", "X"], "--limit 11 is larger"),
    (["train", "--model", "resnet_cifar18"], "needs --data, --out"),
])
def test_errors_are_one_line(capsys, tmp_path, monkeypatch, args, match):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, *args)
    assert code == 2
    errors = [line for line in err.strip().splitlines() if not line.startswith("robustvit: warning:")]
    assert len(errors) == 1 and errors[0].startswith("robustvit: error:") and "Traceback" not in err
    assert match in err


def test_debug_shows_traceback(capsys, tmp_path):
    code = main(["--debug", "eval", "--model", "nope_model", "--data", "synthshapes:test", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" in err


def test_eval_and_report(capsys, tmp_path):
    ck = save_checkpoint(create_model("resnet_cifar18", width_mult=0.0625).eval(), tmp_path / "ck")
    code, out, _ = run(capsys, "eval", "--model", str(ck), "--data", "synthshapes:test,count=40,size=16", "--out",
                       str(tmp_path / "e"), "--no-progress", "--device", "cpu")
    assert code == 0 and out.startswith("ck:")          # a checkpoint folder is named by its folder
    res = json.loads((tmp_path / "e" / "results.json").read_text())
    assert res["model"]["name"] == "ck" and res["model"]["spec"]["architecture"] == "resnet_cifar18"
    assert res["run"]["command"].startswith("robustvit eval")
    code, out, _ = run(capsys, "report", str(tmp_path / "e"), "--out", str(tmp_path / "r"))
    assert code == 0
    html = (tmp_path / "r" / "report.html").read_text()
    assert "Clean accuracy" in html and "data:image/png;base64" in html


def test_list(capsys):
    code, out, _ = run(capsys, "list", "models", "vit_cifar*")
    assert code == 0 and "vit_cifar_tiny" in out.split()
    code, out, _ = run(capsys, "list", "suites")
    assert "clean" in out.split()


def test_console_entry_point():
    proc = subprocess.run([sys.executable, "-m", "robustvit.cli", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("robustvit ")


def test_no_literal_choices_in_the_cli():
    import re
    from pathlib import Path

    import robustvit.cli

    text = Path(robustvit.cli.__file__).read_text()
    assert not re.search(r"choices\s*=\s*[\[\(]\s*['\"]", text), "choices must come from registries or constants"


def _train_args(*args):
    from robustvit.cli import build_parser

    return build_parser().parse_args(["train", *args])


def test_train_flags_come_from_trainconfig_fields():
    import dataclasses

    from robustvit.cli import _train_config
    from robustvit.training import TrainConfig

    a = _train_args("--model", "m", "--data", "d", "--out", "o")
    dests = vars(a)
    for f in dataclasses.fields(TrainConfig):
        if f.name != "loss_options":
            assert f.name in dests, f"TrainConfig.{f.name} has no flag"
    a = _train_args("--model", "m", "--data", "d", "--out", "o", "--batch-size", "7", "--eps", "4/255",
                    "--loss", "trades", "--loss-option", "beta=6", "--set", "accum_steps=2", "--model-kwargs",
                    '{"depth": 4}', "--pretrained", "--no-flip", "--ema-decay", "0.99", "--eps-schedule", "linear")
    cfg = _train_config(a)
    assert (cfg.batch_size, cfg.eps, cfg.loss, cfg.loss_options, cfg.accum_steps) == (7, "4/255", "trades", {"beta": 6}, 2)
    assert cfg.model_kwargs == {"depth": 4} and cfg.pretrained is True and cfg.flip is False and cfg.ema_decay == 0.99
    assert cfg.eps_schedule == "linear" and cfg.lr == TrainConfig.lr         # flags not given keep the defaults


def test_print_config_precedence(capsys, tmp_path):
    import yaml

    conf = tmp_path / "c.yaml"
    conf.write_text(yaml.safe_dump({"model": "vit_cifar_tiny", "data": "synthshapes:train", "out": "o",
                                    "epochs": 3, "weight_decay": 0.1, "lr": 0.01}))
    code, out, err = run(capsys, "train", "--recipe", "light-at", "--config", str(conf), "--lr", "0.02",
                         "--print-config")
    assert code == 0 and err == ""
    cfg = json.loads(out)                                      # JSON, TrainConfig's field names
    from robustvit.training.recipes import get_recipe

    recipe = get_recipe("light-at").settings
    assert cfg["lr"] == 0.02                                   # flag beats --config
    assert cfg["epochs"] == 3 and cfg["weight_decay"] == 0.1   # --config beats the recipe
    assert cfg["recipe"] in ("light-at", "light_at")
    untouched = [k for k in recipe if k not in ("lr", "epochs", "weight_decay")]
    plain = {k: list(v) if isinstance(v, tuple) else v for k, v in recipe.items()}   # JSON has no tuples
    assert untouched and all(cfg[k] == plain[k] for k in untouched)   # the recipe beats the defaults
    assert cfg["seed"] == 0 and not (tmp_path / "o").exists()
    code, out, _ = run(capsys, "finetune", "--model", "m", "--data", "d", "--out", str(tmp_path / "f"),
                       "--img-size", "32", "--print-config")
    assert code == 0 and json.loads(out)["img_size"] == 32 and not (tmp_path / "f").exists()
    printed = tmp_path / "printed.json"                        # the printed configuration is a --config file
    printed.write_text(out)
    code, again, _ = run(capsys, "finetune", "--config", str(printed), "--print-config")
    assert code == 0 and json.loads(again) == json.loads(out)


def test_list_attacks_and_suite_options(capsys):
    code, out, _ = run(capsys, "list", "attacks")
    names = out.split()
    assert code == 0 and "patch_fool" in names and "apgd_ce" in names and "patch-fool" not in names
    code, out, _ = run(capsys, "list", "suites", "pgd", "--options")
    assert code == 0 and out.splitlines()[0] == "pgd"
    assert any(line.strip().startswith("steps: int") for line in out.splitlines())
    assert any(line.strip().startswith("limit:") for line in out.splitlines())
    code, _, err = run(capsys, "list", "models", "--options")
    assert code == 2 and "--options applies" in err


def test_list_perturbations(capsys):
    import robustvit.corruptions

    if not hasattr(robustvit.corruptions, "list_perturbations"):
        pytest.skip("robustvit.corruptions.list_perturbations (the perturbation registry) is not on this branch")
    code, out, _ = run(capsys, "list", "perturbations")
    assert code == 0 and "gaussian_noise" in out.split()
    code, out, _ = run(capsys, "list", "perturbations", "gauss*")
    assert out.split() and all(n.startswith("gauss") for n in out.split())


def test_bad_suite_option_exits_2(capsys, tmp_path):
    code, _, err = run(capsys, "eval", "--model", "resnet_cifar18", "--data", "synthshapes:test", "--suite",
                       "clean:limit=", "--out", str(tmp_path / "e"))
    assert code == 2 and "limit" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["evall"]])
def test_help_version_and_a_bad_command_import_no_torch(argv):
    """``robustvit --help``, ``--version`` and an unknown command answer from the commands' names and help alone
    (#33: they took 5–6 s importing torch); the chosen command's own parser still has every option."""
    code = ("import sys\nfrom robustvit.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')")
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip().splitlines()[-1] == "NO-TORCH", proc.stdout + proc.stderr
    from robustvit.cli import build_parser

    full = build_parser(["eval", "--help"])
    sub = next(a for a in full._actions if a.__class__.__name__ == "_SubParsersAction")
    assert "--chunk-size" in sub.choices["eval"].format_help() and "--loss" not in sub.choices["eval"].format_help()


def test_model_folders_are_named_by_the_run(tmp_path):
    """#33: ``eval --model A,B --out E`` writes E/<run's model name>/: a training run's checkpoint by the run's folder
    (not the architecture); one model writes E itself, or E/<name> when E is already a parent folder of it."""
    from types import SimpleNamespace

    from robustvit.evaluation.runner import _Run, model_dir_name

    m = create_model("resnet_cifar18", width_mult=0.0625)
    for sub in ("checkpoint", "best", "last"):
        save_checkpoint(m, tmp_path / "runs" / "vit-a" / sub)
    save_checkpoint(m, tmp_path / "ck")
    assert model_dir_name(str(tmp_path / "runs" / "vit-a" / "checkpoint"), m) == "vit-a"
    assert model_dir_name(str(tmp_path / "runs" / "vit-a" / "best"), m) == "vit-a-best"
    assert model_dir_name(str(tmp_path / "runs" / "vit-a" / "last") + "/", m) == "vit-a-last"
    assert model_dir_name(str(tmp_path / "ck"), m) == "ck"
    assert model_dir_name("resnet_cifar18", m) == "resnet_cifar18"
    assert model_dir_name(m, m) == "resnet_cifar18"        # a Python object: its architecture
    out = tmp_path / "E"
    one = SimpleNamespace(cfg=SimpleNamespace(out=str(out)), models={"vit-a": m})
    two = SimpleNamespace(cfg=SimpleNamespace(out=str(out)), models={"vit-a": m, "vit-b": m})
    assert _Run.out(one, "vit-a") == out and _Run.out(two, "vit-b") == out / "vit-b"
    (out / "vit-a").mkdir(parents=True)
    (out / "vit-a" / "results.json").write_text("{}")
    assert _Run.out(one, "vit-a") == out / "vit-a"        # E is a parent folder of vit-a's run already


def test_summary_never_cuts_a_number():
    from robustvit.cli import _summary_line

    result = {f"metric_{i}": 0.9578 + i / 1e4 for i in range(12)} | {"n": 200, "name": "x"}
    line = _summary_line("corruptions", result)
    items = line.split(": ", 1)[1].split(", ")
    shown = [i for i in items if "=" in i]
    assert shown and all(f"{k}={result[k]:.4f}" == f"{k}={v}" for k, v in (i.split("=") for i in shown))
    assert items[-1] == f"… {len(result) - 2 - len(shown)} more in results.json" and len(line) <= 130
    assert _summary_line("clean", {"top1": 0.95781, "top5": 1.0}) == "clean: top1=0.9578, top5=1.0000"


def test_eval_prints_what_the_masking_checks_cost_and_left_out(tmp_path, capsys):
    assert main(["eval", "--model", "vit_cifar_micro", "--data", "synthshapes:test,count=8,size=32",
                 "--suite", "pgd:steps=2", "--out", str(tmp_path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    line = next(s for s in out.splitlines() if "gradient-masking checks (auto):" in s)
    assert "% of the attack's time" in line and "not run: blackbox_stronger, more_steps" in line
    assert "checks=all runs them" in line


def test_list_describes_analyses_losses_recipes(capsys):
    from robustvit.analysis.base import get_analysis
    from robustvit.training.recipes import get_recipe

    code, out, _ = run(capsys, "list", "analyses")
    lesion = next(line for line in out.splitlines() if line.split()[0] == "lesion")
    assert code == 0 and lesion.split(None, 1)[1] == get_analysis("lesion").description.split("\n")[0].strip()
    code, out, _ = run(capsys, "list", "recipes", "light_at")
    assert code == 0 and out.split(None, 1)[1].strip() == get_recipe("light_at").description
    code, out, _ = run(capsys, "list", "losses", "ce")
    assert code == 0 and out.split()[0] == "ce" and "ross-entropy" in out
    code, out, _ = run(capsys, "list", "analyses", "lesion", "--options")
    assert code == 0 and out.splitlines()[0] == "lesion" and "  samples: int = 25" in out
    code, out, _ = run(capsys, "list", "recipes", "light_at", "--options")
    settings = get_recipe("light_at").settings
    assert code == 0 and f"  eps: str = {settings['eps']}" in out and len(out.splitlines()) == len(settings) + 1
    code, out, _ = run(capsys, "list", "losses", "trades", "--options")
    assert code == 0 and any(line.strip().startswith("beta: float = 6.0") for line in out.splitlines())


def test_threads(monkeypatch, capsys):
    import os

    import torch

    import robustvit.runs.threads as threads
    from robustvit.runs.threads import default_threads, set_threads

    monkeypatch.setattr(threads, "TORCH_DEFAULT", 8)        # torch's default: 8 physical cores
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5}, raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert default_threads() == 6                           # this process may run on 6 of them
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")            # torchrun: the node's cores shared by its processes
    assert default_threads() == 1
    monkeypatch.setattr(threads, "TORCH_DEFAULT", 2)
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert default_threads() == 2
    before = torch.get_num_threads()
    try:
        assert set_threads(2) == 2 and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    code, _, err = run(capsys, "eval", "--model", "resnet_cifar18", "--data", "synthshapes:test", "--out", "X",
                       "--threads", "0")
    assert code == 2 and err.strip().splitlines() == ["robustvit: error: --threads must be >= 1, got 0"]


def test_offline_pretrained_fails_in_one_line(monkeypatch, tmp_path, capsys):
    """#33: without network, --pretrained checks the class count first, then fails at once naming --weights and
    HF_HUB_OFFLINE (not after a minute of the hub's retries with its raw error)."""
    import huggingface_hub.constants as hub

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path / "empty-cache"), raising=False)
    code, _, err = run(capsys, "eval", "--model", "resnet10t", "--pretrained", "--data", "synthshapes:test,count=8",
                       "--out", str(tmp_path / "e"))
    assert code == 2 and "pretrained weights have 1000 classes but synthshapes:test,count=8 has 10" in err
    cmap = tmp_path / "map.json"
    cmap.write_text(json.dumps(list(range(10))))
    code, _, err = run(capsys, "eval", "--model", "resnet10t", "--pretrained", "--data", "synthshapes:test,count=8",
                       "--class-map", str(cmap), "--out", str(tmp_path / "e"))
    lines = [line for line in err.strip().splitlines() if not line.startswith("robustvit: warning")]
    assert code == 2 and len(lines) == 1 and "--weights" in lines[0] and "HF_HUB_OFFLINE" in lines[0]


def test_interrupted_train_says_resume(monkeypatch, capsys):
    import robustvit.cli as cli

    def interrupted(a):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_train_config", interrupted)
    code, _, err = run(capsys, "train", "--model", "resnet_cifar18", "--data", "synthshapes:train", "--out", "X")
    assert code == 130 and "re-run it with --resume" in err


def test_repeated_suite_flags_add_up(tmp_path):
    """``--suite a --suite b`` runs both (a repeated flag is not silently reduced to its last value)."""
    out = tmp_path / "e"
    assert main(["eval", "--model", "vit_cifar_micro", "--data", "synthshapes:test,count=4,size=32", "--suite", "clean",
                 "--suite", "fgsm:checks=0", "--out", str(out), "--no-progress"]) == 0
    assert set(json.loads((out / "results.json").read_text())["suites"]) == {"clean", "fgsm:checks=0"}
