package sql

// SQLStateStaleFence is ordo's own SQLSTATE, raised by ordo.check_fence (and
// ordo.finish) when a drain's fencing token is stale: the conversation
// was taken over, and the write rolls back. Standard codes come from
// github.com/jackc/pgerrcode.
const SQLStateStaleFence = "ORF01"

// SQLStateRepliesArrived is raised by ordo.check_no_replies when an async
// handler's replies were posted while the drain was giving up on them: the
// drain's dead letter rolls back and the replies are sent instead.
const SQLStateRepliesArrived = "ORR01"

// SQLStateMessageIDReused is raised by ordo.enqueue_message when a
// message_id already accepted for the tenant is offered with another body
// (conversation, direction or payload); the caller's transaction rolls back.
const SQLStateMessageIDReused = "ORM01"

// SQLStateOutsideServiceWindow is raised by ordo.enqueue_message for an
// outbound message that is not a template, to a conversation whose latest
// inbound message (seen through the webhook) is more than 24 hours old:
// WhatsApp's customer service window is closed. Nothing is stored.
const SQLStateOutsideServiceWindow = "ORW01"
