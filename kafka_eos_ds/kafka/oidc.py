"""OIDC client-credentials tokens for the kafka-python coordinator client.

librdkafka fetches OAUTHBEARER tokens itself (``sasl.oauthbearer.method=oidc``);
kafka-python needs a token provider. This one makes the same request: a client
credentials grant with HTTP basic authentication, and keeps the token until shortly
before it expires.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.parse
import urllib.request
from typing import Any, Optional

from kafka.net.sasl.oauth import AbstractTokenProvider

from kafka_eos_ds.errors import KafkaClientError


class ClientCredentialsTokenProvider(AbstractTokenProvider):  # type: ignore[misc]
    def __init__(self, url: str, client_id: str, client_secret: str, scope: Optional[str] = None,
                 extensions: Optional[str] = None) -> None:
        self._url, self._scope = url, scope
        self._auth = base64.b64encode(f"{client_id}:{client_secret}".encode()).decode()
        self._extensions = dict(p.split("=", 1) for p in (extensions or "").split(",") if "=" in p)
        self._token: Optional[str] = None
        self._expires = 0.0

    def __repr__(self) -> str:
        return f"ClientCredentialsTokenProvider({self._url!r})"

    def token(self) -> str:
        if self._token is None or time.time() > self._expires:
            self._token, lifetime = self._fetch()
            self._expires = time.time() + 0.8 * lifetime
        return self._token

    def extensions(self) -> dict:
        return dict(self._extensions)

    def _fetch(self) -> tuple[str, float]:
        form = {"grant_type": "client_credentials", **({"scope": self._scope} if self._scope else {})}
        request = urllib.request.Request(self._url, data=urllib.parse.urlencode(form).encode(),
                                         headers={"Authorization": f"Basic {self._auth}",
                                                  "Content-Type": "application/x-www-form-urlencoded"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                body: Any = json.load(response)
        except Exception as exc:
            raise KafkaClientError(f"authentication failed: the OIDC token request to {self._url} failed "
                                   f"({type(exc).__name__}); check the clientId/clientSecret in "
                                   "kafka.sasl.jaas.config and kafka.sasl.oauthbearer.token.endpoint.url") from None
        return str(body["access_token"]), float(body.get("expires_in", 300))
