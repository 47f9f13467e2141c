//! nfx-testbed (see DESIGN.md).
