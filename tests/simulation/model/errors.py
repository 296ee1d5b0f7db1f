"""Kafka's error codes the models answer with (org.apache.kafka.common.protocol.Errors).

Kept here, not imported from the product, so the models stay independent of the code
they test.
"""

NONE = 0
REQUEST_TIMED_OUT = 7
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
UNSTABLE_OFFSET_COMMIT = 88
PRODUCER_FENCED = 90
TRANSACTIONAL_ID_NOT_FOUND = 105

NAMES = {v: k for k, v in dict(globals()).items() if k.isupper() and isinstance(v, int)}

# What a coordinator answers while it moves or loads (a broker bounce); clients retry.
UNAVAILABLE = (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE)


def name(code: int) -> str:
    return NAMES.get(code, f"ERROR_{code}")
