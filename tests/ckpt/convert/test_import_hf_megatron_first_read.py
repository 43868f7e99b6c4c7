"""An `import-hf --layout mcore` checkpoint passes Megatron-LM's first read of a --load.

megatron/training/checkpointing.py (megatron-core 0.19.2, `_load_base_checkpoint` with
`rank0=True`) begins every fsdp_dtensor --load with a strict `dcp.load` of `args`,
`iteration` and `checkpoint_version`: an import without `args` stopped Megatron-LM there
("Missing key in checkpoint state_dict: args"). The import writes `args` None, "no record";
mfsdp's own readers take it as such.
"""

import json
import warnings

import torch.distributed.checkpoint as dcp

from mfsdp_ckpt.check.describe import describe_checkpoint
from mfsdp_ckpt.check.report import NO_HF_CONFIG
from mfsdp_ckpt.convert.import_hf import import_hf
from mfsdp_ckpt.convert.megatron_record import has_recorded_config, recorded_config
from mfsdp_ckpt.format import checkpoint_resolution
from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.support.hf_model_files import saved_hf_model
from tests.support.interop_layouts import one_error_line, run_cli


def _megatron_release(tmp_path):
    """docs/interop.md's Megatron-LM recipe: the import in LOAD_DIR/release, the tracker
    naming it."""
    source = saved_hf_model(tmp_path, "qwen2", tied=True)
    load_dir = tmp_path / "megatron_ckpt"
    load_dir.mkdir()
    import_hf(source, load_dir / "release", layout_name="mcore")
    (load_dir / "latest_checkpointed_iteration.txt").write_text("release")
    return source, load_dir


def test_megatron_lm_first_read_of_the_import(tmp_path):
    _, load_dir = _megatron_release(tmp_path)
    # exactly the call checkpointing.py makes (one process: no_dist)
    state_dict = {"args": None, "iteration": None, "checkpoint_version": None}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "torch.distributed is disabled ..." for no_dist
        dcp.load(state_dict=state_dict, checkpoint_id=str(load_dir / "release"), no_dist=True)
    assert state_dict == {"args": None, "iteration": 0, "checkpoint_version": 3.0}


def test_args_none_is_no_record_to_mfsdp(tmp_path):
    source, load_dir = _megatron_release(tmp_path)
    paths = checkpoint_resolution.resolve_checkpoint(load_dir)
    reader = CheckpointReader(paths.dist_ckpt)
    assert not has_recorded_config(paths, reader)
    assert recorded_config(paths, reader) is None
    assert describe_checkpoint(load_dir)["recorded_model"] is None

    # nothing to check the weights' shapes against: valid, and a warning says what was not
    # checked (was: `valid` and no word of it)
    code, stdout, stderr = run_cli("ckpt", "validate", load_dir, "--json")
    assert code == 0, stderr
    findings = [(f["severity"], f["message"]) for f in json.loads(stdout)["findings"]]
    assert findings == [("warning", NO_HF_CONFIG)]
    code, stdout, _ = run_cli("ckpt", "validate", load_dir)
    assert code == 0 and f"warning: {paths.dist_ckpt}: {NO_HF_CONFIG}" in stdout, stdout
    code, stdout, _ = run_cli("ckpt", "validate", load_dir, "--hf-config", source, "--json")
    # no record: the config given is named as unchecked against one, and nothing else
    found = [(f["severity"], f["where"]) for f in json.loads(stdout)["findings"]]
    assert code == 0 and found == [("warning", str(source / "config.json"))], stdout

    code, _, stderr = run_cli("ckpt", "export-hf", load_dir, "--out", tmp_path / "no_config")
    line = one_error_line(stderr)
    assert code == 2 and "holds no Hugging Face config" in line and "lacks" not in line

    code, _, stderr = run_cli(
        "ckpt", "export-hf", load_dir, "--out", tmp_path / "hf", "--hf-config", source, "--verify"
    )
    assert code == 0, stderr
    assert "checkpoint's own record" not in stderr
