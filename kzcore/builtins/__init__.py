"""Built-in behaviour as ordinary plugins, registered after every installed plugin so any can override them."""
