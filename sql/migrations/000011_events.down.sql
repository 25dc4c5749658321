DROP TRIGGER IF EXISTS event_on_step ON ordo.steps;
DROP TRIGGER IF EXISTS event_on_dead_letter ON ordo.dead_letters;
DROP TRIGGER IF EXISTS event_on_conversation ON ordo.conversations;
DROP TRIGGER IF EXISTS event_on_tenant ON ordo.tenants;
DROP TABLE ordo.events;
