"""The HTTP face every memplane adapter shares, so backends stay about storage.

`server` (contract routes, descriptor, health, metrics), `rest_api` + `rest_bodies` (the
/api/memories REST API), `curator_api` (/curator/usage), `store_app` (a store's whole app),
and what guards them: `guard` (loopback is not an identity), `auth` (tokens), `admission`
(retains in hand), `bodies` (typed parsing) and `errors` (one error shape)."""
