"""The web dashboard at /ui: pages rendered on the server over the api's own calls."""
