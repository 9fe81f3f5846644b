"""The HTTP face every memplane adapter shares: the contract endpoints (`server`), the REST API
(`rest_api`), the curator's usage (`curator_api`), and what guards them (`guard`, `auth`,
`admission`). Backends stay about storage; the wire work is done here, once."""
