//! nfx-io (see DESIGN.md).
