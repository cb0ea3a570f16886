"""Signed webhooks: the retry schedule, Standard Webhooks signing, and the delivery loop the
dispatcher runs (handed in by ``fairway scheduler``). Events are recorded by the floor
(``service.store.webhook_events``); endpoints are managed in the admin API."""
