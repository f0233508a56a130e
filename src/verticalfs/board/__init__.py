"""``verticalfs board``: a read-only web page over results, event streams, saved models and a deployment.

The board (FastAPI and uvicorn, the ``board`` extra) reads what runs leave under the folders it is
given (:mod:`verticalfs.board.catalog`), shows runs, comparisons and live runs as tables and charts
(:mod:`verticalfs.board.app`; Chart.js, shipped in the package, draws them), and over a deployment
file each party's status, asked through the protocol (:mod:`verticalfs.board.deployment`).

Nothing here is imported by ``import verticalfs`` or by the other commands.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from verticalfs.exceptions import ConfigError

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def read_token(token: str | None, token_file: str | Path | None) -> str | None:
    """The token given, or read from ``token_file`` (its first line; a file others may read is refused)."""
    if token is not None and token_file is not None:
        raise ConfigError("give --token or --token-file, not both")
    if token_file is not None:
        import os
        import stat

        p = Path(token_file)
        try:
            st = p.stat()
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--token-file {str(p)!r} cannot be read: {exc.strerror}") from None
        if os.name == "posix" and st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigError(f"--token-file {str(p)!r} can be read by others (mode {stat.S_IMODE(st.st_mode):o}); "
                              f"chmod 600 {p}")
        token = text.strip().splitlines()[0].strip() if text.strip() else ""
    if token is not None and len(token) < 16:
        raise ConfigError("the board's token must have at least 16 characters (e.g. `python -c 'import secrets; "
                          "print(secrets.token_urlsafe(24))'`)")
    return token


def check_bind(host: str, token: str | None) -> None:
    """Another address than the loopback needs a token."""
    if not is_loopback(host) and token is None:
        raise ConfigError(f"--host {host}: the board would answer anyone who can reach this machine; give --token "
                          "(or --token-file) so that only those who have it can read the results, or keep the default "
                          "--host 127.0.0.1 (and reach it through an SSH tunnel)")


def new_token() -> str:
    return secrets.token_urlsafe(24)


def serve(folders: list[str | Path], *, host: str = "127.0.0.1", port: int = 8765, token: str | None = None,
          deployments: list[str | Path] | None = None, insecure: bool = False, on_ready: Any = None,
          command_line: Any = None) -> None:
    """Run the board with uvicorn until interrupted (``on_ready(url)`` once it listens)."""
    check_bind(host, token)
    try:
        import uvicorn

        from verticalfs.board.app import create_app
    except ImportError as exc:  # the board extra
        raise ConfigError(f"the board needs FastAPI, uvicorn and Jinja2 ({exc.name} is missing): "
                          "pip install 'verticalfs[board]'") from None
    deps = []
    if deployments:
        try:
            import grpc  # noqa: F401
        except ImportError:
            raise ConfigError("--deployment needs the deploy extra (gRPC): pip install "
                              "'verticalfs[board,deploy]'") from None
        from verticalfs.board.deployment import DeploymentStatus

        deps = [DeploymentStatus(d, insecure=insecure) for d in deployments]
    allowed = frozenset({"127.0.0.1", "localhost", "[::1]", "::1"}) if is_loopback(host) else None
    app = create_app(list(folders), token=token, allowed_hosts=allowed, deployments=deps, command_line=command_line)
    hub = app.app.state.hub

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            hub.close()  # the live pages' streams end, so that the server stops at once
            super().handle_exit(sig, frame)

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if on_ready is not None and not self.should_exit:
                on_ready(self)

    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                            timeout_graceful_shutdown=2)
    Server(config).run()
