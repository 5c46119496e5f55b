"""Settings of the Docker engines sandboxes run on (``sandbox.engines`` in a config file).

An engine is anything that serves the Docker Engine API: dockerd or Podman's Docker-compatible
service, over a Unix socket or TCP (optionally with TLS). No ``engines`` means one local
engine (``docker_base_url``, else ``DOCKER_HOST``, else ``/var/run/docker.sock``).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator


class EngineTLS(BaseModel):
    """Client certificates of a TLS engine (``dockerd --tlsverify``); paths on this host."""

    model_config = ConfigDict(extra="forbid")

    ca_cert: Path | None = Field(None, description="CA that signed the engine's certificate; None = system CAs.")
    client_cert: Path | None = Field(None, description="This client's certificate (PEM).")
    client_key: Path | None = Field(None, description="This client's private key (PEM).")
    verify: bool = Field(True, description="Check the engine's certificate against ca_cert.")

    @model_validator(mode="after")
    def _pair(self) -> EngineTLS:
        if (self.client_cert is None) != (self.client_key is None):
            raise ValueError("sandbox.engines[].tls: give client_cert and client_key together (or neither)")
        return self


class EngineConfig(BaseModel):
    """One Docker-API engine of the fleet."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(description="unix:///path/docker.sock, tcp://host:2375, or tcp://host:2376 with tls.")
    slots: int | None = Field(
        None, ge=1, description="Most sandboxes alive at once on this engine; None = sandbox.concurrency."
    )
    tls: EngineTLS | None = Field(None, description="Client TLS settings; None = plain (unix socket or tcp).")
    runtime: str | None = Field(
        None, min_length=1, description="OCI runtime of this engine's trial containers; None = sandbox.runtime."
    )
    max_creates_per_s: float | None = Field(
        None, gt=0,
        description="Most container creates a second on this engine (trials and warm-pool refills together, spaced "
        "evenly); a step's start then ramps instead of asking for every container at once. None = no limit.",
    )
    warm: int | None = Field(
        None, ge=0,
        description="Idle started containers kept per image on this engine, refilled in the background between "
        "steps; None = sandbox.warm_pool_size.",
    )

    @model_validator(mode="after")
    def _scheme(self) -> EngineConfig:
        if not self.url.startswith(("unix://", "tcp://", "http://", "https://")):
            raise ValueError(
                f"sandbox.engines[].url {self.url!r}: use unix:///path/docker.sock or tcp://host:port"
            )
        if self.tls is not None and self.url.startswith("unix://"):
            raise ValueError(f"sandbox.engines[].tls is for tcp:// engines, not {self.url}; remove it")
        return self

    def sdk_tls(self):  # noqa: ANN201 - docker.tls.TLSConfig | None, docker imported lazily
        """The docker SDK's TLS settings, or None for a plain engine."""
        if self.tls is None:
            return None
        import docker.tls

        cert = (str(self.tls.client_cert), str(self.tls.client_key)) if self.tls.client_cert else None
        ca = str(self.tls.ca_cert) if self.tls.ca_cert else None
        return docker.tls.TLSConfig(client_cert=cert, ca_cert=ca, verify=ca if (ca and self.tls.verify) else self.tls.verify)

    def ssl_context(self):  # noqa: ANN201 - ssl.SSLContext | None
        """The same settings as an ``ssl`` context, for the exec and attach streams."""
        if self.tls is None:
            return None
        import ssl

        context = ssl.create_default_context(cafile=str(self.tls.ca_cert) if self.tls.ca_cert else None)
        if not self.tls.verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.tls.client_cert is not None:
            context.load_cert_chain(str(self.tls.client_cert), str(self.tls.client_key))
        return context
