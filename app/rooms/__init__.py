"""Live rooms: a class follows the teacher's view and answers polls (store, service, API, pages)."""
