"""--secret NAME=FILE: a secret the server needs, handed to it by systemd as a credential and never written
by deploy. A key in the env file would sit in releases/ID/env and release.json (read by every user) and in
every trash copy; as a credential (LoadCredential=NAME:FILE) systemd copies the file, at each start, into a
folder only the unit's own user can read, and llama-server reads it from there (LLAMA_ARG_API_KEY_FILE).
What deploy writes holds only FILE's path; the gate reads the key from FILE itself, as root.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from builder.errors import AssembleError


@dataclass(frozen=True)
class SecretKind:
    env: str        # the llama-server variable that names the file it reads the secret from
    why: str        # the env file's comment


# The secrets llama-server takes from a file, by the name --secret gives them.
SECRETS = {
    "api-key": SecretKind("LLAMA_ARG_API_KEY_FILE", "the API keys clients must send (Authorization: Bearer), one a "
                          "line; llama-server reads them from the unit's credential"),
}


def credential_path(unit: str, name: str) -> str:
    """Where systemd puts the credential NAME of UNIT (its `%d/NAME`): the env file names it so."""
    return f"/run/credentials/{unit}/{name}"


def parse_secrets(items: list[str]) -> tuple[tuple[str, Path], ...]:
    """--secret NAME=FILE items: a known NAME, and a FILE that is a regular file no other user can read
    (a key readable by all is no secret, whatever deploy does with it)."""
    out: dict[str, Path] = {}
    for item in items:
        name, sep, given = item.partition("=")
        if not sep or name not in SECRETS or not given:
            raise AssembleError(f"--secret {name or item!r} is not NAME=FILE with a NAME of {', '.join(SECRETS)}",
                                where="--secret", fix="write e.g. --secret api-key=/etc/assemble/chat.key")
        path = Path(os.path.abspath(Path(given).expanduser()))
        try:
            st = path.stat()
        except OSError as exc:
            raise AssembleError(f"the {name} file cannot be read ({exc.strerror})", where=str(path),
                                fix="give the file that holds it (one key a line)") from None
        if not stat.S_ISREG(st.st_mode):
            raise AssembleError(f"the {name} file is not a regular file", where=str(path),
                                fix="give the file that holds it (one key a line)")
        if st.st_mode & 0o077:
            raise AssembleError(f"the {name} file is readable by other users (mode {stat.S_IMODE(st.st_mode):o})",
                                where=str(path), fix=f"chmod 600 {path}")
        if not first_key(path):
            raise AssembleError(f"the {name} file holds no key (one a line; # starts a comment)", where=str(path),
                                fix="write the key into it")
        out[name] = path
    return tuple(out.items())


def first_key(path: Path) -> str | None:
    """The first key of a key file as llama-server reads one (a line; empty lines and # comments skipped)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    return next((line for line in lines if line and not line.startswith("#")), None)
