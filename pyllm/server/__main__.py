"""pyllm-server: a drop-in for llama-server (same flags, same HTTP API)."""
from __future__ import annotations

import os
import socket
import sys
import threading


def bind_socket(host: str, port: int, v6only: bool = False) -> socket.socket:
    """The listening socket, bound before the model loads (as llama-server); OSError when it cannot be."""
    if host.endswith(".sock"):  # llama-server: a hostname ending in .sock is a unix socket path
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(host)
    else:
        fam, typ, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        s = socket.socket(fam, typ, proto)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # not a shared port: a live listener still fails
        if fam == socket.AF_INET6 and v6only:  # several addresses: "::" is IPv6 only (llama-server)
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            s.bind(addr)
        except OSError:
            s.close()
            raise
    s.listen(2048)
    s.setblocking(False)
    return s


def main(argv=None, core=None) -> int:
    """core: a stand-in for pyllm's C++ core (tests/fake_server.py); None = the real one."""
    argv = sys.argv[1:] if argv is None else argv
    from ..args import ArgError, check_supported, main_parse, noop_notice, resolve_model
    from ..log import configure_log, log

    params = main_parse(argv, "server")
    configure_log(disable=params.log_disable, verbosity=params.verbosity)
    try:
        check_supported(params)
        resolve_model(params)
    except ArgError as e:
        print(str(e).rstrip("\n"), file=sys.stderr)
        return 1
    # --host: comma-separated addresses, all bound first: a port in use is one line and exit 1, before anything
    # loads; port 0 picks a free port for the first address, the others take the same one
    hosts = [h.strip() for h in params.hostname.split(",") if h.strip()]
    if not hosts:
        print("error: --host requires at least one address", file=sys.stderr)
        return 1
    socks, port = [], params.port
    for host in hosts:
        try:
            socks.append(bind_socket(host, port, v6only=len(hosts) > 1))
        except OSError as e:
            print(f"error: couldn't bind HTTP server socket, hostname: {host}, port: {port}: "
                  f"{e.strerror or e}", file=sys.stderr)
            for s in socks:
                s.close()
            return 1
        if port == 0 and socks[-1].family != socket.AF_UNIX:
            port = socks[-1].getsockname()[1]
    note = noop_notice(params)
    if note:
        log(note, "cmn", "", "W")

    import uvicorn
    from .app import create_app

    log("initializing ...", "srv", "llama_server")
    log(f"verbosity = {params.verbosity} (adjust with the `-lv N` CLI arg)", "cmn", "common_param")
    if not params.api_keys and params.cors_origins == "*":
        log("security: no API key is set and CORS allows all origins", "srv", "llama_server", "W")
    asgi, state = create_app(params, core=core)
    # timeout_graceful_shutdown: a safety net; streams normally end at once (Engine.drain gives them a final event).
    # No Server / Date header from uvicorn: the gate sends both, spelled as llama-server does
    config = uvicorn.Config(asgi, log_level="warning", access_log=False, server_header=False, date_header=False,
                            timeout_keep_alive=max(5, min(params.timeout, 3600)), lifespan="off",
                            timeout_graceful_shutdown=5)

    class _Server(uvicorn.Server):
        def handle_exit(self, sig, frame):
            # stop accepting (uvicorn) and end what runs (the engine's worker, between two steps)
            if state.engine is not None and not self.should_exit:
                def drain():
                    log("received signal, shutting down", "srv", "operator()")
                    state.engine.drain()
                threading.Thread(target=drain, daemon=True).start()
            super().handle_exit(sig, frame)
            self._captured_signals.clear()  # a clean exit (status 0, as llama-server), not the signal re-raised

    server = _Server(config)
    rc = {"code": 0}

    def loader():
        log(f"loading model '{params.model}'", "srv", "load_model")
        try:
            state.load()
        except Exception as e:  # GGUFError / ValueError from the core
            log(f"failed to load model '{params.model}': {e}", "srv", "load_model", "E")
            log("exiting due to model loading error", "srv", "llama_server", "E")
            rc["code"] = 1
            server.should_exit = True
            return
        eng = state.engine
        log(f"initializing, n_slots = {eng.n_slots}, n_ctx_slot = {eng.n_ctx_slot}, "
            f"kv_unified = '{'true' if params.kv_unified else 'false'}'", "srv", "load_model")
        if eng.spec != "none":
            log(f"speculative decoding: type = {eng.spec}, n_max = {params.spec_draft_n_max}, "
                f"n_min = {params.spec_draft_n_min}, p_min = {params.spec_draft_p_min:.2f}", "srv", "load_model")
        log("model loaded", "srv", "llama_server")
        while not server.started and not server.should_exit:
            threading.Event().wait(0.01)
        addrs = [f"unix://{h}" if h.endswith(".sock") else f"http://{f'[{h}]' if ':' in h else h}:{port}"
                 for h in hosts]
        for a in addrs:
            log(f"listening on {a}", "srv", "llama_server")
        log(f"server is listening on {', '.join(addrs)} - starting the main loop", "srv", "main")
        if port == 8080:
            log("notice: server default port will be changed to :9931 in a future release "
                "(ref: https://github.com/ggml-org/llama.cpp/pull/26508)", "srv", "llama_server", "W")

    th = threading.Thread(target=loader, name="pyllm-loader", daemon=True)
    th.start()
    try:
        server.run(sockets=socks)
    except SystemExit as e:
        if e.code:
            log("couldn't bind HTTP server socket", "srv", "llama_server", "E")
            return 1
    finally:
        if state.engine is not None:
            state.engine.close()
        for h in hosts:  # the unix socket files this server created
            if h.endswith(".sock"):
                try:
                    os.unlink(h)
                except OSError:
                    pass
    if not server.started and rc["code"] == 0:
        log("couldn't bind HTTP server socket", "srv", "llama_server", "E")
        return 1
    log("cleaning up before exit...", "srv", "operator()")
    return rc["code"]


if __name__ == "__main__":
    sys.exit(main())
