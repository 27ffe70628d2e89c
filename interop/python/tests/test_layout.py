"""The package's copy of the wire format's numbers equals schema/layout.json,
which the C and TypeScript suites check against the header itself."""
import json

from conftest import REPO
from gpuring import ERROR_CODES, layout as L

SCHEMA = json.loads((REPO / "schema" / "layout.json").read_text())
STRUCTS = {"segment_header": L.SEGMENT_HEADER, "control": L.CONTROL, "participant": L.PARTICIPANT,
           "slot": L.SLOT, "frame_ref": L.FRAME_REF, "arena_header": L.ARENA_HEADER,
           "body_header": L.BODY_HEADER, "body_node": L.BODY_NODE}
SIZES = {"segment_header": L.HEADER_BYTES, "control": L.CONTROL_BYTES, "participant": L.PARTICIPANT_BYTES,
         "slot": L.SLOT_BYTES, "frame_ref": L.REF_BYTES, "arena_header": L.ARENA_HEADER_BYTES,
         "body_header": L.BODY_HEADER_BYTES, "body_node": L.NODE_BYTES}


def test_struct_sizes_and_offsets():
    for name, fields in STRUCTS.items():
        spec = SCHEMA["structs"][name]
        assert SIZES[name] == spec["size"], name
        for field, offset in fields.items():
            assert spec["fields"][field]["offset"] == offset, f"{name}.{field}"


def test_constants():
    c = SCHEMA["constants"]
    assert (L.VERSION_MAJOR, L.VERSION_MINOR, L.BODY_VERSION) == (c["version_major"], c["version_minor"], c["body_version"])
    assert L.LAYOUT_HASH == int(c["layout_hash"], 16)
    assert L.LAYOUT_HASH_BROADCAST == int(c["layout_hash_broadcast"], 16)
    assert (L.SEGMENT_MAGIC, L.ARENA_MAGIC, L.BODY_MAGIC) == (int(c["segment_magic"], 16), int(c["arena_magic"], 16), int(c["body_magic"], 16))
    for key in ("max_slots", "max_participants", "max_body_bytes", "max_nodes", "max_buffers", "max_depth",
                "max_arenas", "max_count", "handle_bytes", "arena_align", "control_offset", "participants_offset", "name_max"):
        assert getattr(L, key.upper()) == c[key], key


def test_enumerations():
    assert list(L.SLOT_STATES) == SCHEMA["slot_states"]
    assert list(L.MEMORY_KINDS) == SCHEMA["memory_kinds"]
    assert list(L.PARTICIPANT_STATES) == SCHEMA["participant_word"]["state"]["values"]
    assert list(ERROR_CODES[:len(SCHEMA["error_codes"])]) == SCHEMA["error_codes"]
    assert SCHEMA["roles"] == {"producer": L.ROLE_PRODUCER, "consumer": L.ROLE_CONSUMER, "bridge": L.ROLE_BRIDGE}
