"""Whether wandb will find an API key (or needs none), asked as wandb asks, without
importing it.

`trainer.logger=[...,wandb]` without a login failed in every rank once the model was built
(a traceback of 79 lines each, and an empty stdout under --json), or on a terminal stopped
at wandb's account prompt while the other ranks waited. The launching process asks here
first. wandb (0.2x, 0.3x) takes the key from, in order: WANDB_API_KEY (or a
WANDB_IDENTITY_TOKEN_FILE), the netrc file (NETRC, else ~/.netrc, else ~/_netrc) entry of
its server (the host of WANDB_BASE_URL, api.wandb.ai by default), then `api_key` in its
settings files (WANDB_CONFIG_DIR/settings or ~/.config/wandb/settings, then wandb/settings
under WANDB_DIR or the working directory); a run in `offline` (`dryrun`) or `disabled`
mode, from WANDB_MODE or `mode` in those files, needs none. Only these files are read;
nothing is sent anywhere.
"""

from __future__ import annotations

import configparser
import netrc
import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from mfsdp_ckpt.storage import safe_files

NO_KEY = (
    "trainer.logger has wandb but no API key: run `wandb login`, set WANDB_API_KEY, or"
    " WANDB_MODE=offline"
)
DEFAULT_BASE_URL = "https://api.wandb.ai"
NEEDS_NO_KEY = ("offline", "dryrun", "disabled")
MAX_SETTINGS_BYTES = 1 << 20  # a settings file is a few lines


def wandb_key_problem(environ: Mapping[str, str] | None = None) -> str | None:
    """NO_KEY when wandb would find no API key for a run that needs one, else None."""
    env = os.environ if environ is None else environ
    settings = _settings(env)
    mode = env.get("WANDB_MODE") or settings.get("mode", "")
    if mode.strip().lower() in NEEDS_NO_KEY:
        return None
    if env.get("WANDB_API_KEY") or env.get("WANDB_IDENTITY_TOKEN_FILE"):
        return None
    base_url = env.get("WANDB_BASE_URL") or settings.get("base_url") or DEFAULT_BASE_URL
    if _netrc_key(env, urlsplit(base_url).netloc) or settings.get("api_key"):
        return None
    return NO_KEY


def _netrc_key(env: Mapping[str, str], host: str) -> bool:
    """Whether the netrc file wandb reads has a password for `host` (an unreadable or
    malformed file is none, as wandb reads it)."""
    given = env.get("NETRC")
    path: Path | None
    if given:
        path = Path(given).expanduser()
    else:
        home = Path(env.get("HOME") or Path.home())
        path = next((p for p in (home / ".netrc", home / "_netrc") if p.is_file()), None)
    if path is None or not host or not path.is_file():  # a FIFO there would block the read
        return False
    try:
        entry = netrc.netrc(str(path)).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        return False
    return bool(entry and entry[2])


def _settings(env: Mapping[str, str]) -> dict[str, str]:
    """The `[default]` section of wandb's settings files, the workspace's over the global's."""
    config_dir = env.get("WANDB_CONFIG_DIR")
    home = Path(env.get("HOME") or Path.home())
    global_file = (
        Path(config_dir).expanduser() / "settings"
        if config_dir
        else home / ".config" / "wandb" / "settings"
    )
    root = Path(env.get("WANDB_DIR") or os.getcwd())
    workspace = root / (".wandb" if (root / ".wandb").exists() else "wandb") / "settings"
    found: dict[str, str] = {}
    for path in (global_file, workspace):
        found.update(_section(path))
    return found


def _section(path: Path) -> dict[str, str]:
    """The `[default]` section of the settings file at `path`; none when it cannot be read
    (a regular file of at most MAX_SETTINGS_BYTES of UTF-8) or parsed."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(safe_files.read_text(path, MAX_SETTINGS_BYTES))
    except (OSError, configparser.Error):
        return {}
    return dict(parser["default"]) if parser.has_section("default") else {}


__all__ = ["NO_KEY", "wandb_key_problem"]
