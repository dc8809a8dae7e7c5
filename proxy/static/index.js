// The room picker of the index page: go to /rooms/NAME (the form alone would
// send /rooms/?room=NAME).
const form = document.getElementById("pick");
const input = document.getElementById("room");
form.addEventListener("submit", (event) => {
  event.preventDefault();
  const room = input.value.trim();
  if (!/^[A-Za-z0-9_.-]{1,64}$/.test(room)) {
    input.setCustomValidity("letters, digits, _ . - (up to 64)");
    input.reportValidity();
    return;
  }
  location.assign(`/rooms/${room}`);
});
input.addEventListener("input", () => input.setCustomValidity(""));
