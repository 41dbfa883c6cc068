"""rlinf-hw-demo: a sample third-party hardware plugin for rlinf."""
