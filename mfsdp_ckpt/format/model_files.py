"""Which files of a Hugging Face model dir are its files, besides the weights.

A model dir downloaded whole holds much else: the weights in other formats (`.gguf`,
`onnx/`, `tf_model.h5`), a README, images, custom code, a `.git/`. An export copies only
the model's own files from a model dir, and `--overwrite` replaces only a directory that
holds nothing else (`storage/out_dir.py`), so both ask here. The names those files go by
(config.json, a PEFT adapter's two files, the weights' index) are spelled here once: a
misspelled literal elsewhere would quietly find no file.
"""

from __future__ import annotations

from collections.abc import Iterable

HF_CONFIG_FILE = "config.json"  # the model's config: what makes a dir a Hugging Face model dir
# A PEFT adapter dir: its config and its weights, the two files `PeftModel.from_pretrained` reads
ADAPTER_CONFIG_FILE = "adapter_config.json"
ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"
INDEX_FILE = "model.safetensors.index.json"  # sharded weights: which file holds each tensor

# Files transformers reads by these names: a directory there is named as no file, not
# walked as a folder of assets (transformers takes it for a file that is not there).
FILE_NAMES = (
    HF_CONFIG_FILE,
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "chat_template.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
)


# The files of a Hugging Face model dir besides its weights, as transformers' save_pretrained
# writes them: config, generation config, tokenizer, chat templates, processor configs.
_MODEL_FILE_NAMES = frozenset(FILE_NAMES) | {
    "generation_config.json",
    "added_tokens.json",
    "vocab.txt",
    "tekken.json",
    "preprocessor_config.json",
    "processor_config.json",
    "video_preprocessor_config.json",
}
_MODEL_FILE_ENDINGS = (".model", ".tiktoken")  # sentencepiece (spiece.model), tiktoken vocabs
CHAT_TEMPLATES_DIR = "additional_chat_templates"  # name.jinja each, beside chat_template.jinja


def is_model_file(relative: str) -> bool:
    """`relative` (a path inside a model dir) is one of its Hugging Face files besides the
    weights: an export or an import that copied every file of a downloaded model dir wrote
    gigabytes of other formats and thousands of files."""
    folder, _, name = relative.rpartition("/")
    if folder:
        return folder == CHAT_TEMPLATES_DIR and name.endswith(".jinja")
    return name in _MODEL_FILE_NAMES or name.endswith(_MODEL_FILE_ENDINGS)


# What an export writes besides model files: the weights' index, a PEFT adapter's config
# (the weights themselves are *.safetensors).
_EXPORT_FILE_NAMES = frozenset({INDEX_FILE, ADAPTER_CONFIG_FILE})


def is_export_file(relative: str) -> bool:
    """`relative` is a file a model export writes: a model file, or weights and their index."""
    return (
        is_model_file(relative)
        or relative in _EXPORT_FILE_NAMES
        or ("/" not in relative and relative.endswith(".safetensors"))
    )


def top_level_names(relatives: Iterable[str]) -> frozenset[str]:
    """The first part of each path in `relatives` (`adapter` of `adapter/adapter_config.json`):
    what an export that copies those files writes at the top of its output."""
    return frozenset(relative.split("/", 1)[0] for relative in relatives)
