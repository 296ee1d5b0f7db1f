"""Reading user options: case-insensitive keys, typed values, errors that name the option.

Spark hands a data source its options as a case-insensitive map of strings. The
source and the sink each build one frozen, picklable options object from it, once, on
the driver, before anything runs; these helpers are what both use so that every bad
value fails the same way: a ConfigError naming the option, what was given, and the fix.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from kafka_eos_ds.errors import ConfigError

KAFKA_PREFIX = "kafka."


class Options:
    """A case-insensitive, read-only view over Spark's option map."""

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self._raw = {str(k).lower(): ("" if v is None else str(v)) for k, v in dict(raw).items()}
        self._names = {str(k).lower(): str(k) for k in dict(raw)}

    def __contains__(self, name: str) -> bool:
        return name.lower() in self._raw

    def get(self, name: str, default: str | None = None) -> str | None:
        return self._raw.get(name.lower(), default)

    def require(self, name: str, fix: str) -> str:
        value = self.get(name)
        if value is None or value.strip() == "":
            raise ConfigError(f"Option '{name}' is required. {fix}")
        return value.strip()

    def get_int(self, name: str, default: int | None = None, *, minimum: int | None = None) -> int | None:
        value = self.get(name)
        if value is None:
            return default
        try:
            number = int(value.strip())
        except ValueError:
            raise ConfigError(f"Option '{name}' must be a whole number, got {value!r}.") from None
        if minimum is not None and number < minimum:
            raise ConfigError(f"Option '{name}' must be >= {minimum}, got {number}.")
        return number

    def get_bool(self, name: str, default: bool) -> bool:
        value = self.get(name)
        if value is None:
            return default
        lowered = value.strip().lower()
        if lowered in ("true", "1", "yes"):
            return True
        if lowered in ("false", "0", "no"):
            return False
        raise ConfigError(f"Option '{name}' must be true or false, got {value!r}.")

    def get_choice(self, name: str, choices: Iterable[str], default: str) -> str:
        allowed = [c.lower() for c in choices]
        value = (self.get(name) or default).strip().lower()
        if value not in allowed:
            raise ConfigError(f"Option '{name}' must be one of {', '.join(allowed)}; got {value!r}.")
        return value

    def kafka_params(self, owned: Mapping[str, str] = {}) -> dict[str, str]:
        """The ``kafka.*`` options with the prefix stripped, the Java client's settings
        translated into librdkafka's (:mod:`kafka_eos_ds.kafka.java_settings`).

        ``owned`` maps Kafka client keys that the connector sets itself to the reason,
        so the error can say why the key is refused and what to use instead. The result
        hides its secrets when printed.
        """
        from kafka_eos_ds.kafka.java_settings import translate
        from kafka_eos_ds.kafka.settings import ClientParams

        params: dict[str, str] = {}
        for key, value in self._raw.items():
            if not key.startswith(KAFKA_PREFIX):
                continue
            client_key = self._names[key][len(KAFKA_PREFIX):]
            lowered = client_key.lower()
            if lowered in owned:
                raise ConfigError(f"Kafka option 'kafka.{client_key}' is not supported: {owned[lowered]}")
            params[client_key] = value
        if "bootstrap.servers" not in {k.lower() for k in params}:
            raise ConfigError(
                "Option 'kafka.bootstrap.servers' is required: the Kafka brokers to connect to, "
                "e.g. .option('kafka.bootstrap.servers', 'host1:9092,host2:9092')."
            )
        return ClientParams(translate(params))
