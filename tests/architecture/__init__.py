"""The shape of the code: module sizes, the layers and import contracts, the public surface exactly, the layout page."""
