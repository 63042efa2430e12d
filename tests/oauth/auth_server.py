"""A real OAuth 2.1 / OpenID Connect authorization server on loopback, over TLS, for the OAuth lane
tests (issue 25). Not a fake of the host: the host fetches its metadata and keys through the egress
guard, verifies the tokens it signs and introspects them, and the `mcp` SDK client runs its whole
flow against it (dynamic registration, authorization code with PKCE, token, refresh).

What it implements, each as its RFC says:
- metadata: RFC 8414 `/.well-known/oauth-authorization-server` and OIDC discovery
  `/.well-known/openid-configuration` (the same document);
- `/jwks`: every key it ever signed with (a rotation keeps the old one published);
- `/register`: RFC 7591 dynamic client registration (public clients with PKCE, or confidential
  clients with `token_endpoint_auth_method` client_secret_basic / client_secret_post);
- `/authorize`: the authorization code grant with PKCE S256 only (OAuth 2.1), auto-approving the
  resource owner `subject` (no login page: the test is the user); `resource` (RFC 8707) becomes
  the token's `aud`;
- `/token`: authorization_code (PKCE verified, code single-use, redirect_uri bound), refresh_token,
  client_credentials;
- `/introspect`: RFC 7662, HTTP Basic as `introspection_client` (or no client authentication when
  `introspection_auth_methods` lists `none`); `/revoke`: RFC 7009.

Tokens are RS256 JWT access tokens (RFC 9068 shape: iss, sub, aud, iat, nbf, exp, jti, client_id,
scope) signed with the current key; `mint` signs any claims the test wants, including broken ones.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jwt
import trustme
import uvicorn
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from tests.live import free_port

_UNSET: Any = object()
SCOPES = ["mcp:tools", "mcp:resources", "mcp:prompts", "mcp:tasks", "mcp:other", "a2a", "rest", "openid"]


@dataclass
class _Key:
    kid: str
    alg: str
    private: Any

    def jwk(self) -> dict[str, Any]:
        algorithm = RSAAlgorithm if self.alg.startswith(("RS", "PS")) else ECAlgorithm
        public = algorithm.to_jwk(self.private.public_key(), as_dict=True)
        return {**public, "kid": self.kid, "alg": self.alg, "use": "sig"}


def _new_key(alg: str) -> _Key:
    private: Any
    if alg == "ES256":
        private = ec.generate_private_key(ec.SECP256R1())
    else:
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return _Key(kid=f"k-{uuid.uuid4().hex[:12]}", alg=alg, private=private)


@dataclass
class _Client:
    client_id: str
    redirect_uris: list[str]
    secret: str | None
    auth_method: str
    grant_types: list[str]


@dataclass
class _Grant:
    client_id: str
    redirect_uri: str
    challenge: str
    resource: str | None
    scope: str
    subject: str
    claims: dict[str, Any]
    expires: float


@dataclass
class AuthServer:
    """`with AuthServer(ca) as auth:` serves on https://127.0.0.1:<port> until the block ends."""

    ca: trustme.CA
    tmp: Path
    subject: str = "alice"  # whom /authorize approves
    token_claims: dict[str, Any] = field(default_factory=dict)  # extra claims on tokens /token issues
    token_lifetime: int = 300
    requests: list[tuple[str, str]] = field(default_factory=list)
    introspection_client: tuple[str, str] = ("introspector", secrets.token_urlsafe(16))
    # RFC 8414 introspection_endpoint_auth_methods_supported; with "none", /introspect answers anyone.
    introspection_auth_methods: list[str] = field(default_factory=lambda: ["client_secret_basic"])

    def __post_init__(self) -> None:
        self.port = free_port()
        self.issuer = f"https://127.0.0.1:{self.port}"
        self.ca_bundle = str(self.tmp / f"oauth-ca-{self.port}.pem")
        self.ca.cert_pem.write_to_path(self.ca_bundle)
        self._keys: list[_Key] = [_new_key("RS256"), _new_key("ES256")]
        self._current = self._keys[0]
        self._clients: dict[str, _Client] = {}
        self._grants: dict[str, _Grant] = {}
        self._refresh: dict[str, tuple[str, str | None, str, dict[str, Any]]] = {}
        self._revoked: set[str] = set()
        self._lock = threading.Lock()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    # -- the test's handles ------------------------------------------------------------------

    def mint(
        self,
        *,
        sub: str = "alice",
        aud: str | list[str] | None = None,
        lifetime: int = 300,
        iat: Any = _UNSET,
        exp: Any = _UNSET,
        nbf: Any = _UNSET,
        iss: str | None = None,
        kid: str | None = None,
        alg: str = "RS256",
        **claims: Any,
    ) -> str:
        """A signed JWT. `iat=None` / `exp=None` / `nbf=None` leave the claim out; `kid` naming no
        key of ours signs with a fresh key nobody publishes (a bad signature); `alg` picks the
        RS256 or ES256 key."""
        now = int(time.time())
        payload: dict[str, Any] = {"iss": iss or self.issuer, "sub": sub, "jti": uuid.uuid4().hex}
        if aud is not None:
            payload["aud"] = aud
        for name, value, default in (("iat", iat, now), ("nbf", nbf, now), ("exp", exp, now + lifetime)):
            chosen = default if value is _UNSET else value
            if chosen is not None:
                payload[name] = chosen
        payload.update(claims)
        key = self._signing_key(alg, kid)
        return jwt.encode(payload, key.private, algorithm=key.alg, headers={"kid": key.kid})

    def _signing_key(self, alg: str, kid: str | None) -> _Key:
        with self._lock:
            if kid is not None:
                known = next((k for k in self._keys if k.kid == kid), None)
                if known is not None:
                    return known
                stray = _new_key(alg)
                stray.kid = kid
                return stray  # signs, but its public half is published nowhere
            if alg == self._current.alg:
                return self._current
            return next(k for k in reversed(self._keys) if k.alg == alg)

    def rotate(self) -> str:
        """A new RS256 signing key; the old ones stay in the JWKS. Returns the new kid."""
        with self._lock:
            key = _new_key("RS256")
            self._keys.append(key)
            self._current = key
            return key.kid

    def revoke(self, token: str) -> None:
        """Introspection answers `{"active": false}` for this token from now on."""
        with self._lock:
            self._revoked.add(_digest(token))

    def register(
        self,
        *,
        redirect_uris: list[str] | None = None,
        confidential: bool = False,
        grant_types: list[str] | None = None,
    ) -> tuple[str, str | None]:
        """Register a client directly (as an admin would): (client_id, secret or None)."""
        client = self._client_new(
            redirect_uris or [],
            "client_secret_basic" if confidential else "none",
            grant_types or (["client_credentials"] if confidential else ["authorization_code", "refresh_token"]),
        )
        return client.client_id, client.secret

    @property
    def metadata(self) -> dict[str, Any]:
        base = self.issuer
        return {
            "issuer": base,
            "authorization_endpoint": f"{base}/authorize",
            "token_endpoint": f"{base}/token",
            "jwks_uri": f"{base}/jwks",
            "registration_endpoint": f"{base}/register",
            "introspection_endpoint": f"{base}/introspect",
            "revocation_endpoint": f"{base}/revoke",
            "scopes_supported": SCOPES,
            "response_types_supported": ["code"],
            "response_modes_supported": ["query"],
            "grant_types_supported": ["authorization_code", "refresh_token", "client_credentials"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none", "client_secret_basic", "client_secret_post"],
            "introspection_endpoint_auth_methods_supported": list(self.introspection_auth_methods),
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256", "ES256"],
        }

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> AuthServer:
        pem = self.tmp / f"oauth-server-{self.port}.pem"
        self.ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(pem))
        config = uvicorn.Config(
            self._app(), host="127.0.0.1", port=self.port, ssl_certfile=str(pem), ssl_keyfile=str(pem),
            log_level="warning", lifespan="off", timeout_graceful_shutdown=1,
        )  # fmt: skip
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True, name=f"oauth-{self.port}")
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the OAuth authorization server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)

    # -- the endpoints -----------------------------------------------------------------------

    def _app(self) -> Starlette:
        routes = [
            Route("/.well-known/oauth-authorization-server", self._metadata),
            Route("/.well-known/openid-configuration", self._metadata),
            Route("/jwks", self._jwks),
            Route("/register", self._register, methods=["POST"]),
            Route("/authorize", self._authorize),
            Route("/token", self._token, methods=["POST"]),
            Route("/introspect", self._introspect, methods=["POST"]),
            Route("/revoke", self._revoke, methods=["POST"]),
        ]
        app = Starlette(routes=routes)

        async def recorded(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                self.requests.append((scope["method"], scope["path"]))
            await app(scope, receive, send)

        return recorded  # type: ignore[return-value]

    async def _metadata(self, request: Request) -> Response:
        return JSONResponse(self.metadata)

    async def _jwks(self, request: Request) -> Response:
        with self._lock:
            keys = [k.jwk() for k in self._keys]
        return JSONResponse({"keys": keys}, headers={"Cache-Control": "max-age=60"})

    def _client_new(self, redirect_uris: list[str], auth_method: str, grant_types: list[str]) -> _Client:
        secret = None if auth_method == "none" else secrets.token_urlsafe(24)
        client = _Client(f"c-{uuid.uuid4().hex[:16]}", redirect_uris, secret, auth_method, grant_types)
        with self._lock:
            self._clients[client.client_id] = client
        return client

    async def _register(self, request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            return _error("invalid_client_metadata", "the body is not JSON")
        if not isinstance(body, dict):
            return _error("invalid_client_metadata", "the body is not a JSON object")
        redirect_uris = body.get("redirect_uris") or []
        if not isinstance(redirect_uris, list) or not all(isinstance(u, str) for u in redirect_uris):
            return _error("invalid_redirect_uri", "redirect_uris must be a list of strings")
        auth_method = body.get("token_endpoint_auth_method", "client_secret_basic")
        if auth_method not in ("none", "client_secret_basic", "client_secret_post"):
            return _error("invalid_client_metadata", f"unsupported token_endpoint_auth_method {auth_method}")
        grant_types = body.get("grant_types") or ["authorization_code", "refresh_token"]
        client = self._client_new(redirect_uris, auth_method, grant_types)
        answer = {
            **body,
            "client_id": client.client_id,
            "client_id_issued_at": int(time.time()),
            "redirect_uris": redirect_uris,
            "token_endpoint_auth_method": auth_method,
            "grant_types": grant_types,
        }
        if client.secret is not None:
            answer["client_secret"] = client.secret
            answer["client_secret_expires_at"] = 0
        return JSONResponse(answer, status_code=201)

    async def _authorize(self, request: Request) -> Response:
        q = request.query_params
        with self._lock:
            client = self._clients.get(q.get("client_id", ""))
        redirect_uri = q.get("redirect_uri", "")
        if client is None or redirect_uri not in client.redirect_uris:
            # Never redirect to an unregistered URI (RFC 6749 §4.1.2.1): answer here.
            return _error("invalid_request", "unknown client_id or unregistered redirect_uri")
        state = q.get("state")

        def redirect_error(code: str) -> Response:
            params = {"error": code, **({"state": state} if state else {})}
            return RedirectResponse(f"{redirect_uri}?{urlencode(params)}", status_code=302)

        if q.get("response_type") != "code":
            return redirect_error("unsupported_response_type")
        if q.get("code_challenge_method") != "S256" or not q.get("code_challenge"):
            return redirect_error("invalid_request")  # OAuth 2.1: PKCE S256 is required
        code = secrets.token_urlsafe(24)
        with self._lock:
            self._grants[code] = _Grant(
                client.client_id, redirect_uri, q["code_challenge"], q.get("resource"), q.get("scope", ""),
                self.subject, dict(self.token_claims), time.time() + 60,
            )  # fmt: skip
        params = {"code": code, **({"state": state} if state else {})}
        return RedirectResponse(f"{redirect_uri}?{urlencode(params)}", status_code=302)

    def _client_auth(self, request: Request, form: Any) -> _Client | None:
        """The client the request authenticates as (Basic or post body), or a public client by id."""
        client_id, secret = form.get("client_id"), form.get("client_secret")
        header = request.headers.get("authorization", "")
        if header.lower().startswith("basic "):
            try:
                client_id, _, secret = base64.b64decode(header[6:]).decode().partition(":")
            except ValueError:
                return None
        with self._lock:
            client = self._clients.get(client_id or "")
        if client is None:
            return None
        if client.secret is not None and not (secret and secrets.compare_digest(secret, client.secret)):
            return None
        return client

    def _issue(
        self, client_id: str, subject: str, resource: str | None, scope: str, claims: dict[str, Any]
    ) -> dict[str, Any]:
        extra = {"client_id": client_id, **({"scope": scope} if scope else {}), **claims}
        token = self.mint(sub=subject, aud=resource, lifetime=self.token_lifetime, **extra)
        refresh = secrets.token_urlsafe(24)
        with self._lock:
            self._refresh[refresh] = (client_id, resource, scope, {"sub": subject, **claims})
        answer = {"access_token": token, "token_type": "Bearer", "expires_in": self.token_lifetime,
                  "refresh_token": refresh}  # fmt: skip
        if scope:
            answer["scope"] = scope
        return answer

    async def _token(self, request: Request) -> Response:
        form = await request.form()
        client = self._client_auth(request, form)
        if client is None:
            return _error("invalid_client", "client authentication failed", status=401)
        grant_type = form.get("grant_type")
        if grant_type == "authorization_code":
            with self._lock:
                grant = self._grants.pop(str(form.get("code", "")), None)  # single use
            if grant is None or grant.client_id != client.client_id or grant.expires < time.time():
                return _error("invalid_grant", "unknown, used or expired code")
            if form.get("redirect_uri") != grant.redirect_uri:
                return _error("invalid_grant", "redirect_uri does not match the authorization request")
            verifier = str(form.get("code_verifier", ""))
            challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
            if not verifier or not secrets.compare_digest(challenge, grant.challenge):
                return _error("invalid_grant", "PKCE verification failed")
            resource = str(form.get("resource") or grant.resource or "") or None
            return JSONResponse(self._issue(client.client_id, grant.subject, resource, grant.scope, grant.claims))
        if grant_type == "refresh_token":
            with self._lock:
                held = self._refresh.pop(str(form.get("refresh_token", "")), None)
            if held is None or held[0] != client.client_id:
                return _error("invalid_grant", "unknown refresh token")
            _, resource, scope, claims = held
            subject = claims.pop("sub")
            return JSONResponse(self._issue(client.client_id, subject, resource, scope, claims))
        if grant_type == "client_credentials":
            if client.secret is None:
                return _error("unauthorized_client", "public clients cannot use client_credentials")
            resource = str(form.get("resource") or "") or None
            scope = str(form.get("scope") or "")
            return JSONResponse(
                self._issue(client.client_id, client.client_id, resource, scope, dict(self.token_claims))
            )
        return _error("unsupported_grant_type", f"grant_type {grant_type!r} is not supported")

    def _introspector(self, request: Request) -> bool:
        header = request.headers.get("authorization", "")
        if not header.lower().startswith("basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except ValueError:
            return False
        want_user, want_password = self.introspection_client
        return secrets.compare_digest(user, want_user) and secrets.compare_digest(password, want_password)

    async def _introspect(self, request: Request) -> Response:
        anonymous = "none" in self.introspection_auth_methods and "authorization" not in request.headers
        if not anonymous and not self._introspector(request):
            return _error("invalid_client", "introspection needs the introspection client", status=401)
        form = await request.form()
        token = str(form.get("token", ""))
        with self._lock:
            revoked = _digest(token) in self._revoked
            keys = {k.kid: k for k in self._keys}
        if revoked:
            return JSONResponse({"active": False})
        try:
            kid = jwt.get_unverified_header(token).get("kid")
            key = keys[kid]
            claims = jwt.decode(
                token, key.private.public_key(), algorithms=[key.alg], options={"verify_aud": False}, issuer=self.issuer
            )
        except (jwt.PyJWTError, KeyError):
            return JSONResponse({"active": False})
        return JSONResponse({"active": True, "token_type": "Bearer", **claims})

    async def _revoke(self, request: Request) -> Response:
        form = await request.form()
        if self._client_auth(request, form) is None and not self._introspector(request):
            return _error("invalid_client", "client authentication failed", status=401)
        self.revoke(str(form.get("token", "")))
        return Response(status_code=200)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _error(code: str, description: str, *, status: int = 400) -> Response:
    return JSONResponse({"error": code, "error_description": description}, status_code=status)
