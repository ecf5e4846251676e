"""The cloud providers' credentials and ``[[providers]]`` settings (Bedrock's AWS keys,
Vertex AI's Google service accounts): what the config loader resolves when such a provider
is configured, kept apart from the adapters in ``gatewayd.providers`` so that reading a config
imports no adapter and no translator (``gatewayd.protocols`` names these modules; they are
imported only for a protocol the config uses)."""
