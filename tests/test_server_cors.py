"""The CORS policy and the --cors-* flags as llama-server applies them (llama-server-api.md section 1, its
pre-routing handler): with credentials (the default) `*` echoes the request's Origin; `localhost` echoes only a
localhost origin (others are left out, with a warning); any other value is sent as given; OPTIONS on any path is
200 with an empty text/html body, the credentials / methods / headers, and no API key check. On the fake core
(the policy is the HTTP layer's)."""
import httpx
import pytest

from server_util import Server

ORIGIN_H = "access-control-allow-origin"


def options(s, path="/v1/chat/completions", origin="http://example.com"):
    return httpx.options(s.url + path, headers={"Origin": origin} if origin else {}, timeout=30)


@pytest.fixture(scope="module")
def default():
    with Server(fake=True) as s:
        yield s


def test_default_echoes_the_origin(default):
    r = default.get("/health", headers={"Origin": "http://a.example:3000"})
    assert r.status_code == 200 and r.headers[ORIGIN_H] == "http://a.example:3000"
    r = default.get("/health")
    assert r.headers[ORIGIN_H] == ""  # llama-server echoes the (missing) Origin: an empty value
    r = options(default, "/any/path/at/all")
    assert r.status_code == 200 and r.content == b"" and r.headers["content-type"].startswith("text/html")
    assert r.headers[ORIGIN_H] == "http://example.com"
    assert r.headers["access-control-allow-credentials"] == "true"
    assert r.headers["access-control-allow-methods"] == "GET, POST, DELETE, OPTIONS"
    assert r.headers["access-control-allow-headers"] == "*"


def test_no_credentials_sends_star():
    with Server("--no-cors-credentials", fake=True) as s:
        assert s.get("/health", headers={"Origin": "http://a.example"}).headers[ORIGIN_H] == "*"
        r = options(s)
        assert r.headers[ORIGIN_H] == "*" and r.headers["access-control-allow-credentials"] == "false"


def test_localhost_policy_flags_and_options_without_key():
    with Server("--cors-origins", "localhost", "--cors-methods", "GET, POST", "--cors-headers", "Content-Type",
                "--api-key", "k", fake=True) as s:
        for origin in ("http://localhost:5173", "http://127.0.0.1", "http://[::1]:8080"):
            r = s.get("/v1/models", headers={"Origin": origin, "Authorization": "Bearer k"})
            assert r.status_code == 200 and r.headers[ORIGIN_H] == origin
        r = s.get("/v1/models", headers={"Origin": "http://evil.example", "Authorization": "Bearer k"})
        assert r.status_code == 200 and ORIGIN_H not in r.headers
        assert "(CORS) skip non-localhost origin: http://evil.example" in s.output()
        r = s.get("/v1/models", headers={"Origin": "http://localhost"})  # no key: 401, still with CORS
        assert r.status_code == 401 and r.headers[ORIGIN_H] == "http://localhost"
        r = options(s, origin="http://localhost:1")  # browsers send no key with a preflight
        assert r.status_code == 200 and r.headers[ORIGIN_H] == "http://localhost:1"
        assert r.headers["access-control-allow-methods"] == "GET, POST"
        assert r.headers["access-control-allow-headers"] == "Content-Type"
        assert r.headers["access-control-allow-credentials"] == "true"
        assert ORIGIN_H not in options(s, origin="http://evil.example").headers


def test_literal_origins_from_the_environment():
    with Server(env={"LLAMA_ARG_CORS_ORIGINS": "https://app.example"}, fake=True) as s:
        for origin in ("http://other.example", None):
            r = s.get("/health", headers={"Origin": origin} if origin else {})
            assert r.headers[ORIGIN_H] == "https://app.example"
