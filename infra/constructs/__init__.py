"""One construct per concern: data, notifications, auth, batch compute, functions, events, api."""
