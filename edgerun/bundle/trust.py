"""Which keys sign and which keys are trusted: the user's edgerun configuration.

Two keys can be configured, each by an environment variable or by the user's config file:

* the key ``package`` signs with (a private PEM): ``EDGERUN_SIGNING_KEY``, or
  ``signing_key = "PATH"`` in the config file;
* the key bundles must be signed by (a public key): ``EDGERUN_TRUSTED_KEY``, or
  ``trusted_key = "PATH"`` in the config file.

The config file is TOML: ``$EDGERUN_CONFIG`` when set, else
``$XDG_CONFIG_HOME/edgerun/config.toml`` (``~/.config/edgerun/config.toml``). Relative paths
in it are relative to the file's folder. The environment wins over the file; an explicit
argument (``trusted_key=``, ``--key``, ``--sign``) wins over both.

A variable that is set but empty is an error, never a silent "no key": ``EDGERUN_TRUSTED_KEY=""``
would otherwise switch the signature check off.

Policy (:func:`check_trust`): an unsigned bundle is refused unless the caller passes
``allow_unsigned=True`` (``--allow-unsigned``) and no trusted key is given or configured (a
configured key is binding); a signed bundle must verify (strict Ed25519), and when a trusted key
is given or configured, must be signed by exactly that key.
"""

from __future__ import annotations

import os
from pathlib import Path

from edgerun.bundle import signing
from edgerun.errors import BundleError, BundleIntegrityError

SIGNING_KEY_ENV = "EDGERUN_SIGNING_KEY"
TRUSTED_KEY_ENV = "EDGERUN_TRUSTED_KEY"
CONFIG_ENV = "EDGERUN_CONFIG"


def config_path() -> Path:
    """Where the user's edgerun config file is (it need not exist)."""
    env = os.environ.get(CONFIG_ENV)
    if env is not None:
        if not env.strip():
            raise BundleError(f"{CONFIG_ENV} is set but empty: unset it or name a config file")
        return Path(env).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "edgerun" / "config.toml"


def load_config() -> dict:
    """The config file as a dict ({} when there is none); BundleError when it is unreadable."""
    p = config_path()
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        if os.environ.get(CONFIG_ENV) is not None:
            raise BundleError(f"{CONFIG_ENV} names {str(p)!r}, which does not exist") from None
        return {}
    except OSError as e:
        raise BundleError(f"cannot read edgerun config {str(p)!r}: {e.strerror}") from None
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        raise BundleError(f"reading {str(p)!r} needs Python 3.11 (tomllib); use the environment "
                          f"variables {SIGNING_KEY_ENV} / {TRUSTED_KEY_ENV} instead") from None
    try:
        cfg = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise BundleError(f"edgerun config {str(p)!r} is not valid TOML: {e}") from None
    for k in ("signing_key", "trusted_key"):
        v = cfg.get(k)
        if v is not None and (not isinstance(v, str) or not v.strip()):
            raise BundleError(f"edgerun config {str(p)!r}: {k} must be a non-empty path string")
    return cfg


def _configured(env: str, key: str):
    v = os.environ.get(env)
    if v is not None:
        if not v.strip():
            raise BundleError(f"{env} is set but empty: unset it, or name a key file")
        return v
    cfg = load_config()
    if cfg.get(key):
        p = Path(cfg[key]).expanduser()
        return str(p if p.is_absolute() else config_path().parent / p)
    return None


def signing_key():
    """The configured signing key (a path), or None."""
    return _configured(SIGNING_KEY_ENV, "signing_key")


def trusted_key():
    """The configured trusted public key (a path or hex string), or None."""
    return _configured(TRUSTED_KEY_ENV, "trusted_key")


def resolve_trusted(explicit=None) -> bytes | None:
    """32 public key bytes: the explicit key, else the configured one; None when neither."""
    key = explicit if explicit is not None else trusted_key()
    if key is None:
        return None
    if isinstance(key, str) and not key.strip():
        raise BundleError("the trusted key is an empty string: name a public key file")
    pub = signing.public_key_bytes(key)
    signing.check_public_key(pub)
    return pub


def check_trust(public_key: bytes | None, *, trusted_key=None, allow_unsigned: bool = False) -> bytes | None:
    """Apply the trust policy to a bundle signed by ``public_key`` (None: unsigned).

    The signature itself has already been checked. Returns the trusted key in force (or None).
    """
    want = resolve_trusted(trusted_key)
    if public_key is None:
        if want is not None:  # a trusted key is binding: allow_unsigned does not override it
            raise BundleIntegrityError(f"bundle is not signed, but a trusted key ({signing.fingerprint(want)}) is "
                                       "given or configured: sign it with `edgerun package --sign KEY`")
        if allow_unsigned:
            return None
        raise BundleIntegrityError("bundle is not signed: sign it with `edgerun package --sign KEY` (or configure "
                                   "EDGERUN_SIGNING_KEY), or accept it explicitly with --allow-unsigned "
                                   "(allow_unsigned=True)")
    if want is not None and public_key != want:
        raise BundleIntegrityError(f"bundle is signed by key {signing.fingerprint(public_key)}, not by the "
                                   f"trusted key {signing.fingerprint(want)}")
    return want
