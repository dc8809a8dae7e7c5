// liveroom.js: the poll loop (coming next).
export {};
