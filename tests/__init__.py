"""The test suite, grouped like the code: ckpt/ (mfsdp_ckpt; convert/ for export-hf and
import-hf), trainer/ (data/ for trainer.data), grpo/, rollout/, cli/, bench/, and reliability/
(damaged, hostile and crashing inputs against every consumer). A GPU test (`-m gpu`) sits
next to its CPU twin. Helpers more than one folder uses live in support/.

Every folder is a package, so pytest puts the repository root on sys.path and every test
and helper imports the same way, from the root: `from tests.support.sft import ...`. A
subprocess a test starts imports the same way: cwd or PYTHONPATH is the repository root
(`tests.support.paths.REPO`), and a worker script runs as `python -m tests.<folder>.<name>`.
"""
