/* Prints the header's layout (sizes, field offsets and widths) and constants as
 * JSON. test/schema.test.ts compares it with schema/layout.json and with the
 * TypeScript codec's constants, so the three cannot drift apart. */
#include "gpuring.h"

#define FIELD(s, f) printf("%s\"%s\": {\"offset\": %zu, \"bytes\": %zu}", first++ ? ", " : "", #f, offsetof(s, f), sizeof(((s *)0)->f))
#define STRUCT(name, s, FIELDS)                                          \
  do {                                                                   \
    int first = 0;                                                       \
    printf("%s\"%s\": {\"size\": %zu, \"fields\": {", sep, name, sizeof(s)); \
    FIELDS;                                                              \
    printf("}}");                                                        \
    sep = ", ";                                                          \
  } while (0)

int main(void) {
  const char *sep = "";
  printf("{\"structs\": {");
  STRUCT("segment_header", gpr_segment_header,
         (FIELD(gpr_segment_header, magic), FIELD(gpr_segment_header, ready_version), FIELD(gpr_segment_header, header_size),
          FIELD(gpr_segment_header, layout_hash), FIELD(gpr_segment_header, total_size), FIELD(gpr_segment_header, slot_count),
          FIELD(gpr_segment_header, slot_size), FIELD(gpr_segment_header, participant_capacity),
          FIELD(gpr_segment_header, participant_size), FIELD(gpr_segment_header, control_offset),
          FIELD(gpr_segment_header, participants_offset), FIELD(gpr_segment_header, slots_offset),
          FIELD(gpr_segment_header, pid_namespace), FIELD(gpr_segment_header, created_unix_ns),
          FIELD(gpr_segment_header, creator_pid), FIELD(gpr_segment_header, flags), FIELD(gpr_segment_header, name),
          FIELD(gpr_segment_header, reserved)));
  STRUCT("control", gpr_control,
         (FIELD(gpr_control, tail), FIELD(gpr_control, head), FIELD(gpr_control, data_seq), FIELD(gpr_control, data_waiters),
          FIELD(gpr_control, data_doorbells), FIELD(gpr_control, space_seq), FIELD(gpr_control, space_waiters),
          FIELD(gpr_control, space_doorbells), FIELD(gpr_control, redeliver), FIELD(gpr_control, subscribers),
          FIELD(gpr_control, recovered), FIELD(gpr_control, redelivered)));
  STRUCT("participant", gpr_participant,
         (FIELD(gpr_participant, state), FIELD(gpr_participant, pid), FIELD(gpr_participant, roles),
          FIELD(gpr_participant, start_time), FIELD(gpr_participant, attached_unix_ns), FIELD(gpr_participant, arena_count),
          FIELD(gpr_participant, published), FIELD(gpr_participant, leased), FIELD(gpr_participant, released),
          FIELD(gpr_participant, doorbell), FIELD(gpr_participant, doorbell_pipe), FIELD(gpr_participant, doorbell_key), FIELD(gpr_participant, cursor),
          FIELD(gpr_participant, missed), FIELD(gpr_participant, missed_seen), FIELD(gpr_participant, subscription),
          FIELD(gpr_participant, proxy), FIELD(gpr_participant, doorbell_pipe_ino)));
  STRUCT("slot", gpr_slot, (FIELD(gpr_slot, word), FIELD(gpr_slot, ref), FIELD(gpr_slot, pending)));
  STRUCT("frame_ref", gpr_frame_ref,
         (FIELD(gpr_frame_ref, frame_id), FIELD(gpr_frame_ref, producer), FIELD(gpr_frame_ref, producer_gen),
          FIELD(gpr_frame_ref, body_arena), FIELD(gpr_frame_ref, body_length), FIELD(gpr_frame_ref, body_offset),
          FIELD(gpr_frame_ref, user_tag), FIELD(gpr_frame_ref, flags)));
  STRUCT("arena_header", gpr_arena_header,
         (FIELD(gpr_arena_header, magic), FIELD(gpr_arena_header, size), FIELD(gpr_arena_header, owner_pid),
          FIELD(gpr_arena_header, owner_index), FIELD(gpr_arena_header, owner_gen), FIELD(gpr_arena_header, arena)));
  STRUCT("body_header", gpr_body_header,
         (FIELD(gpr_body_header, magic), FIELD(gpr_body_header, version), FIELD(gpr_body_header, flags),
          FIELD(gpr_body_header, body_length), FIELD(gpr_body_header, node_count), FIELD(gpr_body_header, buffer_count),
          FIELD(gpr_body_header, root_count), FIELD(gpr_body_header, dictionary_count), FIELD(gpr_body_header, strings_length),
          FIELD(gpr_body_header, row_count), FIELD(gpr_body_header, metadata_offset), FIELD(gpr_body_header, metadata_length),
          FIELD(gpr_body_header, sync_kind), FIELD(gpr_body_header, sync_handle)));
  STRUCT("body_node", gpr_body_node,
         (FIELD(gpr_body_node, name_offset), FIELD(gpr_body_node, name_length), FIELD(gpr_body_node, format_offset),
          FIELD(gpr_body_node, format_length), FIELD(gpr_body_node, metadata_offset), FIELD(gpr_body_node, metadata_length),
          FIELD(gpr_body_node, child_count), FIELD(gpr_body_node, flags), FIELD(gpr_body_node, dictionary),
          FIELD(gpr_body_node, buffer_count), FIELD(gpr_body_node, length), FIELD(gpr_body_node, null_count),
          FIELD(gpr_body_node, offset)));
  STRUCT("body_buffer", gpr_body_buffer,
         (FIELD(gpr_body_buffer, kind), FIELD(gpr_body_buffer, flags), FIELD(gpr_body_buffer, device_ordinal),
          FIELD(gpr_body_buffer, device_uuid), FIELD(gpr_body_buffer, offset), FIELD(gpr_body_buffer, length), FIELD(gpr_body_buffer, alloc_id), FIELD(gpr_body_buffer, pool_id),
          FIELD(gpr_body_buffer, handle)));
  printf("}, \"constants\": {\"version_major\": %u, \"version_minor\": %u, \"layout_hash\": \"%016llx\", "
         "\"layout_string\": \"%s\", \"layout_hash_broadcast\": \"%016llx\", \"layout_string_broadcast\": \"%s\", \"segment_magic\": \"%016llx\", \"arena_magic\": \"%016llx\", \"body_magic\": \"%08x\", "
         "\"body_version\": %u, \"control_offset\": %u, \"participants_offset\": %u, \"name_max\": %u, \"max_slots\": %u, "
         "\"max_participants\": %u, \"max_body_bytes\": %u, \"max_nodes\": %u, \"max_buffers\": %u, \"max_depth\": %u, "
         "\"max_arenas\": %u, \"max_count\": %llu, \"handle_bytes\": %u, \"arena_align\": %u, "
         "\"ring_broadcast\": %u, \"max_broadcast_participants\": %u, \"cursor_evicted\": \"%016llx\", \"cursor_dropping\": \"%016llx\"}",
         GPR_VERSION_MAJOR, GPR_VERSION_MINOR, (unsigned long long)GPR_LAYOUT_HASH, GPR_LAYOUT_STRING,
         (unsigned long long)GPR_LAYOUT_HASH_BROADCAST, GPR_LAYOUT_STRING_BROADCAST,
         (unsigned long long)GPR_SEGMENT_MAGIC, (unsigned long long)GPR_ARENA_MAGIC, GPR_BODY_MAGIC, GPR_BODY_VERSION,
         GPR_CONTROL_OFFSET, GPR_PARTICIPANTS_OFFSET, GPR_NAME_MAX, GPR_MAX_SLOTS, GPR_MAX_PARTICIPANTS, GPR_MAX_BODY_BYTES,
         GPR_MAX_NODES, GPR_MAX_BUFFERS, GPR_MAX_DEPTH, GPR_MAX_ARENAS, (unsigned long long)GPR_MAX_COUNT, GPR_HANDLE_BYTES,
         GPR_ARENA_ALIGN, GPR_RING_BROADCAST, GPR_MAX_BROADCAST_PARTICIPANTS, (unsigned long long)GPR_CURSOR_EVICTED, (unsigned long long)GPR_CURSOR_DROPPING);
  printf(", \"error_codes\": [");
  for (int i = 0; i < GPR_E_COUNT_; i++) printf("%s\"%s\"", i ? ", " : "", gpr_code_name((gpr_code)i));
  printf("]}\n");
  return 0;
}
