"""A client for specd's daemons (specd-drafter, specd-verifier): ZeroMQ DEALER + the protobuf
envelopes of ipc/specd.proto (specd_pb2, generated: see regenerate.sh)."""
from .client import Client, VerifyResult, SCHEMA_HASH, PROTOCOL_MAJOR

__all__ = ["Client", "VerifyResult", "SCHEMA_HASH", "PROTOCOL_MAJOR"]
